"""The shutdown's own lifecycle, shared by PID 1 and the orchestrator: one
enum and one table of allowed moves, in the style of the process lifecycle
(``supervisor.runtime.state``).

::

    RUNNING ──► STOPPING ──► HURRYING ──► AT_WALL ──► EXITED
       │           │  └────────────┴─────────┐           ▲
       │           └─────────────► AT_WALL   ▼           │
       └─────────────────────────────────► SWEEPING ─────┘

RUNNING
    no shutdown yet: stop signals start one; other signals are forwarded.
STOPPING
    the plan runs against a known wall (the first stop signal plus the grace
    period, or the wall the orchestrator reported).
HURRYING
    a second stop signal or an expired deadline: every stop escalates to
    SIGKILL now; PID 1 gives the orchestrator a short slice before it does
    that itself.
AT_WALL
    the wall has passed with the orchestrator (or the main process) still
    running: PID 1 SIGKILLs everything and exits with ``ExitCode.WALL``.
SWEEPING
    the orchestrator (or, without one, the main process) has exited: PID 1
    sends TERM to what is left, waits until the wall, KILLs the rest.
EXITED
    nothing is left; PID 1 exits.

Each process keeps its own `ShutdownLifecycle`; the orchestrator's moves
reach PID 1 as messages on the status pipe, so the two agree on what was
reached even when one of them is stalled.
"""

from __future__ import annotations

import enum
import time

__all__ = [
    "IllegalShutdownTransition",
    "ShutdownLifecycle",
    "ShutdownState",
    "check_shutdown_transition",
    "wall_margin",
]


# Whoever stops the main process (the orchestrator's plan, or PID 1 itself on
# the direct path) escalates to SIGKILL this much before the wall, so that
# the shutdown can finish on its own (kill, reap, log the timeline, exit) before PID 1 has
# to step in: 5 % of the grace period, at most 250 ms.  On an idle machine
# that takes about 5 ms, but on a loaded one the orchestrator waits for a
# core between each of those steps: with 1 % (20 ms of a 2 s grace period)
# the wall often came first at a load of 17 on 2 cores, and the user lost
# the timeline.  The cost is that a process without a stop_timeout is
# killed up to 250 ms before the grace period ends, which the kubelet's own
# SIGKILL at the grace period would not have spared it anyway.
_MARGIN_FRACTION = 0.05
_MARGIN_MAX = 0.25


def wall_margin(grace_period: float) -> float:
    """How long before the wall the stops escalate to SIGKILL."""
    return min(_MARGIN_MAX, grace_period * _MARGIN_FRACTION)


class ShutdownState(enum.Enum):
    RUNNING = "running"
    STOPPING = "stopping"
    HURRYING = "hurrying"
    AT_WALL = "at the wall"
    SWEEPING = "sweeping"
    EXITED = "exited"

    @property
    def shutting_down(self) -> bool:
        """True once a shutdown has begun (a stop signal now means: hurry)."""
        return self is not ShutdownState.RUNNING


_S = ShutdownState
# The one table.  RUNNING → SWEEPING: the orchestrator (or the main process,
# when PID 1 runs it itself) exited before any stop was asked for.  A
# second stop signal during the sweep kills what is left at once, which is
# part of sweeping, not a state of its own.
SHUTDOWN_TRANSITIONS: dict[ShutdownState, frozenset[ShutdownState]] = {
    _S.RUNNING: frozenset({_S.STOPPING, _S.SWEEPING}),
    _S.STOPPING: frozenset({_S.HURRYING, _S.AT_WALL, _S.SWEEPING}),
    _S.HURRYING: frozenset({_S.AT_WALL, _S.SWEEPING}),
    _S.AT_WALL: frozenset({_S.EXITED}),
    _S.SWEEPING: frozenset({_S.EXITED}),
    _S.EXITED: frozenset(),
}


class IllegalShutdownTransition(RuntimeError):
    """A move the table does not allow: a bug in the supervisor."""


def check_shutdown_transition(current: ShutdownState, new: ShutdownState) -> None:
    if new not in SHUTDOWN_TRANSITIONS[current]:
        raise IllegalShutdownTransition(f"shutdown: {current.value} → {new.value} is not an allowed transition")


class ShutdownLifecycle:
    """The shutdown's state and since when (``time.monotonic()``), changed
    only through the table."""

    def __init__(self) -> None:
        self.state = ShutdownState.RUNNING
        self.since = time.monotonic()

    def enter(self, new: ShutdownState) -> None:
        check_shutdown_transition(self.state, new)
        self.state = new
        self.since = time.monotonic()

    def advance_to(self, new: ShutdownState) -> bool:
        """Enter ``new`` unless it is the state already (a move both
        processes may report); True if the state changed."""
        if self.state is new:
            return False
        self.enter(new)
        return True
