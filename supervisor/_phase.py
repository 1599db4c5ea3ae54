"""The phases of a run, by name: one enum for the plan, its hooks, the
timeline, ``check``'s plan text and the plugins' ``phase:`` keys.

A `StrEnum`: each phase is also its plain name, so a YAML value, a hook's
``phase=`` argument and a timeline step's ``phase`` compare equal to it,
print as it, and a plugin may keep writing ``"pre_stop"``.  Standard
library only: loading a configuration (``config/_render.py``) needs the
names without trio.
"""

from __future__ import annotations

import enum

__all__ = ["Phase"]


class Phase(enum.StrEnum):
    """In the order a run goes through them.  ``wind_down`` runs beside
    ``pre_stop`` (and goes on when the main process exits), so it comes
    next; ``stop`` is each process's stop (stop signal, wait, SIGKILL), the
    plan's own step between that process's two hooks."""

    STARTUP = "startup"
    SHUTDOWN_STARTED = "shutdown_started"
    PRE_STOP = "pre_stop"
    WIND_DOWN = "wind_down"
    BEFORE_PROCESS_STOP = "before_process_stop"
    STOP = "stop"
    AFTER_PROCESS_STOP = "after_process_stop"
    POST_STOP = "post_stop"

    @property
    def has_hook(self) -> bool:
        """Whether plugins act in this phase (every phase but ``stop``)."""
        return self is not Phase.STOP

    @property
    def hook(self) -> str:
        """The hook called in this phase (``supervisor_pre_stop``)."""
        if not self.has_hook:
            raise ValueError(f"no hook is called in the {self} phase")
        return f"supervisor_{self.value}"

    @property
    def per_process(self) -> bool:
        """Whether it happens once for each process (its entries name one)."""
        return self in (Phase.BEFORE_PROCESS_STOP, Phase.STOP, Phase.AFTER_PROCESS_STOP)
