"""How a process ended, and the exit code a container reports for it."""

from __future__ import annotations

import os
from dataclasses import dataclass

from ._units import signal_name

__all__ = ["ExitStatus"]


@dataclass(frozen=True, slots=True)
class ExitStatus:
    """A process's end: an exit code, or the signal that killed it.

    ``exit_code`` folds both into the 0-255 value a shell (and the kubelet)
    reports: the code itself, or 128+N for death by signal N.
    """

    code: int | None = None
    signal: int | None = None

    @classmethod
    def from_wait_status(cls, status: int) -> ExitStatus:
        """From the raw status of ``os.waitpid``."""
        if os.WIFSIGNALED(status):
            return cls(signal=os.WTERMSIG(status))
        return cls(code=os.waitstatus_to_exitcode(status))

    @classmethod
    def from_returncode(cls, returncode: int) -> ExitStatus:
        """From ``subprocess``-style return codes, where -N means signal N."""
        if returncode < 0:
            return cls(signal=-returncode)
        return cls(code=returncode)

    @property
    def exit_code(self) -> int:
        if self.signal is not None:
            return 128 + self.signal
        return (self.code or 0) & 0xFF

    @property
    def success(self) -> bool:
        return self.signal is None and self.code == 0

    def __str__(self) -> str:
        if self.signal is not None:
            return f"killed by {signal_name(self.signal)} (exit code {self.exit_code})"
        return f"exited with code {self.code}"
