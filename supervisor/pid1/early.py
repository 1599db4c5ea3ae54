"""The orchestrator's first moments: catch signals before trio is imported.

The init layer forks the orchestrator with every signal blocked.  Here,
before the heavy imports, recording handlers go in and the mask is cleared,
so a SIGTERM that was queued during start-up lands in ``pending`` and is
replayed into trio's signal receiver once it exists.  Stdlib only.
"""

from __future__ import annotations

import signal
import time
from types import FrameType

from .._units import FORWARDABLE_SIGNALS, PIPE_RELAY

__all__ = ["ORCHESTRATOR_SIGNALS", "EarlySignals"]

# What the orchestrator listens to: everything forwardable, but SIGPIPE only
# as relayed by the init layer (see PIPE_RELAY); its own SIGPIPE stays ignored.
ORCHESTRATOR_SIGNALS = (FORWARDABLE_SIGNALS - {signal.SIGPIPE}) | {PIPE_RELAY}


class EarlySignals:
    def __init__(self) -> None:
        self.pending: list[int] = []
        # When each arrived (time.monotonic): a SIGTERM's grace period runs
        # from its arrival, not from when trio got round to it.
        self.arrived: list[float] = []

    @classmethod
    def install(cls, parent_pid: int) -> EarlySignals:
        early = cls()
        for signo in ORCHESTRATOR_SIGNALS:
            signal.signal(signo, early._record)
        # If the init layer is SIGKILLed (possible only when it is not PID 1),
        # the kernel tells us with SIGTERM and we shut our processes down
        # instead of leaving them running.  The init layer is single-threaded,
        # so the "parent thread exited" caveat of PDEATHSIG does not apply.
        try:
            import os

            from .._libc import PR_SET_PDEATHSIG, prctl

            prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
            if os.getppid() != parent_pid:  # it died before we asked
                early._record(signal.SIGTERM, None)
        except (ImportError, OSError):
            pass
        # Children inherit the mask through fork and exec; start them clean.
        signal.pthread_sigmask(signal.SIG_SETMASK, set())
        return early

    def _record(self, signo: int, _frame: FrameType | None) -> None:
        self.pending.append(signal.SIGPIPE if signo == PIPE_RELAY else signo)
        self.arrived.append(time.monotonic())

    def take(self) -> list[tuple[int, float]]:
        """The signals so far with their arrival times, oldest first."""
        taken = list(zip(self.pending, self.arrived, strict=True))
        self.pending, self.arrived = [], []
        return taken
