"""How a process ended, and the exit code a container reports for it.

Imported by the init layer (PID 1) as well as the orchestrator, so it stays
light: a plain slotted class rather than a dataclass, because ``dataclasses``
imports ``inspect`` (with ``ast``, ``dis`` and ``tokenize``), about 10 ms and
1.3 MiB of PID 1's private memory for the life of the pod.
"""

from __future__ import annotations

import os

from ._units import signal_name

__all__ = ["ExitStatus"]


class ExitStatus:
    """A process's end: an exit code, or the signal that killed it.

    ``exit_code`` folds both into the 0-255 value a shell (and the kubelet)
    reports: the code itself, or 128+N for death by signal N.  Immutable,
    compared and hashed by value.
    """

    __slots__ = ("_code", "_signal")
    __match_args__ = ("code", "signal")
    _code: int | None
    _signal: int | None

    def __init__(self, code: int | None = None, signal: int | None = None) -> None:
        object.__setattr__(self, "_code", code)
        object.__setattr__(self, "_signal", signal)

    # Read-only properties, so that type checkers refuse an assignment as
    # they would for a frozen dataclass; __setattr__ refuses it at run time.
    @property
    def code(self) -> int | None:
        """The exit code, None if a signal killed it."""
        return self._code

    @property
    def signal(self) -> int | None:
        """The signal that killed it, None if it exited."""
        return self._signal

    @classmethod
    def from_wait_status(cls, status: int) -> ExitStatus:
        """From the raw status of ``os.waitpid`` (the init layer's reaper)."""
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

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"ExitStatus is immutable: cannot set {name!r}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"ExitStatus is immutable: cannot delete {name!r}")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ExitStatus):
            return NotImplemented
        return (self.code, self.signal) == (other.code, other.signal)

    def __hash__(self) -> int:
        return hash((ExitStatus, self.code, self.signal))

    def __reduce__(self) -> tuple[type[ExitStatus], tuple[int | None, int | None]]:
        # copy and pickle rebuild it through __init__ (__setattr__ refuses).
        return ExitStatus, (self.code, self.signal)

    def __repr__(self) -> str:
        return f"ExitStatus(code={self.code!r}, signal={self.signal!r})"

    def __str__(self) -> str:
        if self.signal is not None:
            return f"killed by {signal_name(self.signal)} (exit code {self.exit_code})"
        return f"exited with code {self.code}"
