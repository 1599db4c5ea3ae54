"""The lifecycle of one supervised process: its states and the only moves
between them.

One enum and one table instead of loose flags (``running``, ``stopping``,
``failed``...): every change of a process's state goes through
``Lifecycle.enter``, which checks it against the table, so a move the table
does not allow is a bug found at once, and ``supervisor status`` can report
the state as it is.

::

    PENDING ──► STARTING ──► RUNNING ──► STOPPING ──► STOPPED
                 │  ▲           │                       │
                 │  └─ BACKOFF ◄┤ (restart policy)      │
                 ▼              ▼                       │
           EXITED / FAILED ◄────┘                       │
                 └──────────── STARTING ◄───────────────┘ (started again)
"""

from __future__ import annotations

import enum
import time

__all__ = ["IllegalTransition", "Lifecycle", "ProcessState", "check_transition"]


class ProcessState(enum.Enum):
    """Where a supervised process is in its life."""

    PENDING = "pending"
    """Not started yet: waiting for its dependency level."""
    STARTING = "starting"
    """Being spawned, or spawned and its readiness check not passed yet."""
    RUNNING = "running"
    """Running, and ready (immediately so without a readiness check)."""
    BACKOFF = "backoff"
    """Exited; the restart policy will start it again after a delay."""
    STOPPING = "stopping"
    """Its stop signal was sent; waiting for it to exit (or be killed)."""
    STOPPED = "stopped"
    """Exited because it was asked to stop; stays so until started again."""
    EXITED = "exited"
    """Exited by itself and its restart policy does not restart it."""
    FAILED = "failed"
    """Failed for good: crash loop past its backoff limit, or a non-main
    process that exited unsuccessfully and is not restarted."""

    @property
    def alive(self) -> bool:
        """True while there is (or is about to be) an OS process."""
        return self in (ProcessState.STARTING, ProcessState.RUNNING, ProcessState.STOPPING)

    @property
    def final(self) -> bool:
        """True when nothing will start it again unless asked to."""
        return self in (ProcessState.STOPPED, ProcessState.EXITED, ProcessState.FAILED)


_S = ProcessState
# The one table of allowed moves.  A stop request may come in any live or
# waiting state; a spawn failure is an exit like any other (STARTING →
# BACKOFF/EXITED/FAILED), so no state is ever skipped over.
TRANSITIONS: dict[ProcessState, frozenset[ProcessState]] = {
    _S.PENDING: frozenset({_S.STARTING, _S.STOPPED}),
    _S.STARTING: frozenset({_S.RUNNING, _S.STOPPING, _S.BACKOFF, _S.EXITED, _S.FAILED}),
    _S.RUNNING: frozenset({_S.STOPPING, _S.BACKOFF, _S.EXITED, _S.FAILED}),
    _S.BACKOFF: frozenset({_S.STARTING, _S.STOPPED}),
    # STOPPING → BACKOFF/FAILED: a run stopped to be restarted (a failing
    # health check, SupervisedProcess.restart_run) goes back through the
    # restart policy, which may also give up on it.
    _S.STOPPING: frozenset({_S.STOPPED, _S.BACKOFF, _S.FAILED}),
    _S.STOPPED: frozenset({_S.STARTING}),
    _S.EXITED: frozenset({_S.STARTING}),
    _S.FAILED: frozenset({_S.STARTING}),
}


class IllegalTransition(RuntimeError):
    """A move the table does not allow: a bug in the supervisor."""


def check_transition(name: str, current: ProcessState, new: ProcessState) -> None:
    if new not in TRANSITIONS[current]:
        raise IllegalTransition(f"{name}: {current.value} → {new.value} is not an allowed transition")


class Lifecycle:
    """One process's state and since when (``time.monotonic()``), changed
    only through the table."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.state = ProcessState.PENDING
        self.since = time.monotonic()

    def enter(self, new: ProcessState) -> None:
        check_transition(self.name, self.state, new)
        self.state = new
        self.since = time.monotonic()

    def settle_in(self, new: ProcessState) -> None:
        """Enter ``new`` unless it is the state already: for a move that two
        parties may both make (a stop during a backoff is seen by the stop
        request and by the supervising task; whichever comes first moves)."""
        if self.state is not new:
            self.enter(new)
