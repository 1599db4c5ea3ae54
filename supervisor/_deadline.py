"""The shutdown budget: one object that every step of the plan draws from.

A Kubernetes pod has one grace period for everything: hooks, stop signals,
waits and the final SIGKILL.  Recomputing "time left" in many places drifts and
double-counts, so the plan holds a single Deadline, hands it to every hook, and
derives every cancel scope from it.  When a plugin learns the real deadline
(the pod's deletionTimestamp) or a second SIGTERM asks to hurry, the change
reaches every scope that is already waiting.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import trio

from .pid1.protocol import SECOND_SIGNAL_SLICE

__all__ = ["Deadline", "reserve_for", "slack", "trio_now"]

# Hooks stop this long before the escalation moment so that the plan can
# still deliver stop signals and SIGKILL itself.  10% of the budget, at most
# one second: a 2 s budget keeps 200 ms, a 30 s one keeps 1 s.
_RESERVE_FRACTION = 0.1
_RESERVE_MAX = 1.0
# A deadline moved earlier keeps the reserve it had, unless that would be
# more than a fifth of what is left then.  Stopping processes takes as long
# as before, so the reserve should not shrink with the budget; but hooks must
# still get most of a short budget (a pod deleted with a 2 s grace period
# leaves hooks 1.6 s, not 1.0 s).
_SHORTENED_RESERVE_FRACTION = 0.2


def slack(at_most: float, fraction: float, of: float) -> float:
    """A margin to keep back from ``of`` seconds: ``fraction`` of it, never
    more than ``at_most``.  The one rule for every "leave a little time for
    what comes after" in the core and the plugins, so that short budgets
    shrink the margin in proportion and long ones cap it."""
    return min(at_most, max(0.0, of) * fraction)


def reserve_for(budget: float) -> float:
    """How much of a ``budget`` the plan keeps for stop signals and SIGKILL."""
    return slack(_RESERVE_MAX, _RESERVE_FRACTION, budget)


def trio_now() -> float:
    """trio's clock, also from a worker thread (a plain ``def`` hook runs in
    one and may call ``shorten()``)."""
    try:
        return trio.current_time()
    except RuntimeError:
        return trio.from_thread.run_sync(trio.current_time)


def _in_trio_thread() -> bool:
    try:
        trio.lowlevel.current_trio_token()
    except RuntimeError:
        return False
    return True


class Deadline:
    """When the supervisor escalates to SIGKILL, and how much time is left.

    ``wall`` is the hard end: the init layer (PID 1) kills whatever is left
    there, whatever the orchestrator is doing (see supervisor/pid1/protocol.py).
    ``at``, ``margin`` seconds before it, is the orchestrator's own escalation
    moment on trio's clock: process stops end there with SIGKILL, so that the
    orchestrator normally finishes before the wall.  Hooks run in scopes that
    end ``reserve`` seconds before ``at``, and those before the processes stop
    (``pre_stop``, ``wind_down``) also ``kept`` seconds earlier: the time
    plugins asked to keep for their steps after the stops (`keep_for_later`).
    The deadline only ever moves earlier; ``on_wall`` hears every move
    (seconds from now to the wall), ``on_expire`` every `expire` (the
    orchestrator's shutdown then hurries).
    """

    def __init__(
        self,
        budget: float,
        *,
        reserve: float | None = None,
        elapsed: float = 0.0,
        margin: float = 0.0,
        on_wall: Callable[[float], None] | None = None,
        on_expire: Callable[[], None] | None = None,
    ) -> None:
        """``elapsed``: how long ago the budget started (a SIGTERM that
        arrived while the supervisor was still starting)."""
        now = trio.current_time()
        self.started = now - max(0.0, elapsed)
        self.budget = budget
        self.margin = min(max(0.0, margin), budget)
        self._wall = self.started + budget
        self._at = self._wall - self.margin
        self.reserve = reserve_for(budget) if reserve is None else reserve
        self.kept = 0.0
        # How long the plan's stops may take at most (each dependency level's
        # longest stop_timeout, added up; set by the plan): a hook that keeps
        # the processes serving as long as it helps ends this long before the
        # hooks' time is up.
        self.stop_time = 0.0
        self.reasons: list[str] = []
        self.on_wall = on_wall
        self.on_expire = on_expire
        # Scopes currently following the deadline: (scope, keeps the reserve,
        # its own fixed limit).  A list, not a weak set: scopes leave it when
        # their `with` block ends, and there are only ever a handful.
        self._scopes: list[tuple[trio.CancelScope, bool, float]] = []

    @property
    def at(self) -> float:
        return self._at

    @property
    def wall(self) -> float:
        return self._wall

    @property
    def expired(self) -> bool:
        return trio_now() >= self._at

    def remaining(self) -> float:
        """Seconds until escalation to SIGKILL."""
        return max(0.0, self._at - trio_now())

    def remaining_for_hooks(self) -> float:
        """Seconds a hook may still use: up to the escalation moment less the
        reserve, and less what is `kept` for the steps after the stops."""
        return max(0.0, self._at - self.reserve - self.kept - trio_now())

    def keep_for_later(self, seconds: float) -> None:
        """Keep ``seconds`` back from the hooks that run before the processes
        stop, for a step that comes after them (a Lease released once its
        holder has exited: one read and one write).  Without it a drain or a
        fixed delay that fills the budget leaves that step nothing.  Requests
        add up; the plan hands the time back (`hand_back`) once the stops
        begin.  Never more than what hooks have left."""
        if not _in_trio_thread():
            trio.from_thread.run_sync(self.keep_for_later, seconds)
            return
        self.kept = min(self.kept + max(0.0, seconds), self.kept + self.remaining_for_hooks())
        self._update_scopes()

    def hand_back(self) -> None:
        """The steps before the stops are over: what they kept is free again."""
        self.kept = 0.0
        self._update_scopes()

    def nothing_left_to_stop(self) -> None:
        """Every process has stopped: the reserve for stop signals and
        SIGKILL is no longer needed, and the hooks after the stops may run up
        to the escalation moment."""
        self.reserve = 0.0
        self._update_scopes()

    def elapsed(self) -> float:
        return trio_now() - self.started

    def slack(self, at_most: float, fraction: float = 0.1, *, of: float | None = None) -> float:
        """A margin for a step to keep back, for reporting or cleaning up
        after its own wait: ``fraction`` of ``of`` seconds (by default the
        time hooks have left, `remaining_for_hooks`), never more than
        ``at_most``.  ``deadline.remaining_for_hooks() - deadline.slack(0.5)``
        is how long a step may wait and still have time to say what
        happened."""
        return slack(at_most, fraction, self.remaining_for_hooks() if of is None else of)

    def announce(self) -> None:
        """Tell ``on_wall`` where the wall is now."""
        if self.on_wall is not None:
            self.on_wall(max(0.0, self._wall - trio.current_time()))

    def shorten(self, remaining: float, reason: str) -> bool:
        """Move the deadline to ``remaining`` seconds from now if that is sooner.

        Returns whether it moved.  ``reason`` ends up in the log and the
        timeline ("pod deletion deadline").  ``remaining`` counts to the
        wall; the orchestrator's escalation stays ``margin`` before it.
        """
        if not _in_trio_thread():
            return trio.from_thread.run_sync(self.shorten, remaining, reason)
        now = trio.current_time()
        wall = now + max(0.0, remaining)
        if wall >= self._wall:
            return False
        self._wall = wall
        self._at = max(now, min(self._at, wall - self.margin))
        self.reserve = min(self.reserve, max(0.0, remaining) * _SHORTENED_RESERVE_FRACTION)
        self.reasons.append(reason)
        self._update_scopes()
        self.announce()
        return True

    def expire(self, reason: str, *, slice_seconds: float = SECOND_SIGNAL_SLICE) -> None:
        """Escalate now: every waiting hook is cancelled, every stop kills.
        The wall comes ``slice_seconds`` later at the latest: what the
        orchestrator has to finish the escalation before PID 1 does it."""
        if not _in_trio_thread():
            trio.from_thread.run_sync(lambda: self.expire(reason, slice_seconds=slice_seconds))
            return
        now = trio.current_time()
        self._at = min(self._at, now)
        self._wall = min(self._wall, now + slice_seconds)
        self.reserve = 0.0
        self.reasons.append(reason)
        self._update_scopes()
        self.announce()
        if self.on_expire is not None:
            self.on_expire()

    @contextmanager
    def scope(self, *, keep_reserve: bool = True, timeout: float = math.inf) -> Iterator[trio.CancelScope]:
        """A cancel scope that ends with the deadline (less the reserve) or ``timeout``.

        The scope follows later changes of the deadline; ``timeout`` is fixed
        from the moment the scope is entered.
        """
        entry = (trio.CancelScope(), keep_reserve, trio.current_time() + timeout)
        self._scopes.append(entry)
        self._update_scopes()
        try:
            with entry[0]:
                yield entry[0]
        finally:
            self._scopes.remove(entry)

    def _update_scopes(self) -> None:
        for cancel_scope, keep_reserve, own_limit in self._scopes:
            escalation = self._at - self.reserve - self.kept if keep_reserve else self._at
            cancel_scope.deadline = min(own_limit, escalation)
