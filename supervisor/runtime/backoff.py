"""Restart delays for a crashing process: exponential backoff with jitter.

The tracker only does arithmetic on the times it is given; the caller passes
``trio.current_time()`` (a monotonic clock) and sleeps the returned delay, so
a crash loop costs no CPU and tests run on trio's MockClock.

Jitter: "equal jitter" (half the exponential delay, plus a random part of up
to the other half).  "Full jitter" (anything from 0 to the delay) spreads
restarts a little better, but it would sometimes restart a crashing process
almost at once, which is what a backoff exists to prevent.  Equal jitter
still de-synchronises processes that crashed together (all lost the same
dependency) while every delay stays at least half of the configured one.
"""

from __future__ import annotations

import random
from collections import deque

from supervisor.config._model import Backoff

__all__ = ["RestartTracker"]

# The delay doubles per consecutive restart; past this many doublings any
# sane ``max`` has long been reached, and 2.0**n would overflow for large n.
_MAX_DOUBLINGS = 64


class RestartTracker:
    """Decides whether, and after how long, an exited process restarts.

    Call ``started(now)`` each time the process is spawned and
    ``next_delay(now)`` each time it exited and the restart policy wants it
    back.  ``next_delay`` returns the seconds to wait before the restart, or
    None once the process has failed for good: more than
    ``policy.max_restarts`` restarts would fall inside the sliding
    ``policy.window``.

    A run that stayed up for longer than ``window`` proves the process can
    work: the next crash starts the sequence over at ``initial``.
    """

    def __init__(self, policy: Backoff, rng: random.Random | None = None) -> None:
        self.policy = policy
        self._rng = rng if rng is not None else random.Random()
        # When each restart was decided (the moment the process had exited),
        # oldest first; only those inside the window are kept.
        self._restarts: deque[float] = deque()
        self._consecutive = 0  # restarts since the sequence last reset
        self._last_start: float | None = None

    @property
    def attempt(self) -> int:
        """Restarts inside the window as of the last ``next_delay`` call.

        1 right after the first restart was granted; reported to plugins as
        ``supervisor_process_restarted(attempt=...)``.
        """
        return len(self._restarts)

    def in_window(self, now: float) -> int:
        """Restarts that fall inside the window ending at ``now`` (for
        ``supervisor status``)."""
        return sum(1 for when in self._restarts if when > now - self.policy.window)

    def started(self, now: float) -> None:
        """Record that the process was spawned at ``now``."""
        self._last_start = now

    def next_delay(self, now: float) -> float | None:
        """The delay before restarting a process that exited at ``now``.

        None means the process has failed for good; later calls keep
        returning None until older restarts leave the window.
        """
        policy = self.policy
        if self._last_start is not None and now - self._last_start > policy.window:
            self._restarts.clear()
            self._consecutive = 0
        while self._restarts and self._restarts[0] <= now - policy.window:
            self._restarts.popleft()
        if len(self._restarts) >= policy.max_restarts:
            return None
        base = min(policy.max, policy.initial * 2.0 ** min(self._consecutive, _MAX_DOUBLINGS))
        self._restarts.append(now)
        self._consecutive += 1
        half = base / 2
        return half + self._rng.uniform(0.0, half)
