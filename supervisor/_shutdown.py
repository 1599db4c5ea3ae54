"""The orchestrator's side of the shutdown: its state, and the facts of a
shutdown once one has begun.

The state is the one both processes share (``supervisor.pid1.state``),
moved only through its table.  The orchestrator reaches three of its
states: RUNNING until the first trigger, STOPPING while the plan runs,
HURRYING once the deadline was expired (a second stop signal, or a plugin
calling ``Deadline.expire``).  AT_WALL, SWEEPING and EXITED are PID 1's: it
reaches them after the orchestrator has exited, or instead of it.

The facts — why, since when, the deadline — are one `Shutdown`, made at the
first trigger in the same call that enters STOPPING: they exist exactly
when the state says a shutdown has begun, and whoever waits for the
shutdown gets them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import trio

from ._deadline import Deadline
from .pid1.state import ShutdownLifecycle, ShutdownState

__all__ = ["Shutdown", "ShutdownTracker"]


@dataclass(frozen=True, slots=True)
class Shutdown:
    """Why and since when the deployment is going down, and its deadline;
    made once, never replaced.

    ``arrived``: trio time of the trigger's arrival (a signal that came in
    during start-up arrived before trio ran).  ``signal``: the stop signal
    that asked for it, None for any other trigger.  ``main_stop_signal``:
    what the main process gets instead of its configured stop signal, if
    anything.
    """

    reason: str
    arrived: float
    deadline: Deadline
    signal: int | None = None
    main_stop_signal: int | None = None


class ShutdownTracker:
    """The orchestrator's `ShutdownLifecycle` and the `Shutdown` that goes with it."""

    def __init__(self, on_move: Callable[[ShutdownState], None] | None = None) -> None:
        self._lifecycle = ShutdownLifecycle()
        # Told every state entered (the orchestrator tells PID 1).
        self._on_move = on_move
        self._shutdown: Shutdown | None = None
        # Set by `begin` only, in the same call as the move to STOPPING: for
        # the tasks that wait for the shutdown (the health checks end then).
        self._begun = trio.Event()

    @property
    def state(self) -> ShutdownState:
        return self._lifecycle.state

    @property
    def current(self) -> Shutdown | None:
        """The shutdown under way; None while RUNNING."""
        return self._shutdown

    @property
    def begun(self) -> trio.Event:
        """Set once the shutdown has begun (never cleared)."""
        return self._begun

    def begin(self, shutdown: Shutdown) -> None:
        """RUNNING → STOPPING with ``shutdown``'s facts.  A second start is
        an ``IllegalShutdownTransition``: callers ask `state` first."""
        self._lifecycle.enter(ShutdownState.STOPPING)
        self._shutdown = shutdown
        self._begun.set()
        self._moved()

    def hurry(self) -> None:
        """STOPPING → HURRYING: the deadline has been expired (again: no change)."""
        if self._lifecycle.advance_to(ShutdownState.HURRYING):
            self._moved()

    def _moved(self) -> None:
        if self._on_move is not None:
            self._on_move(self._lifecycle.state)

    async def wait(self) -> Shutdown:
        """Until the shutdown begins; its facts."""
        await self._begun.wait()
        if self._shutdown is None:  # pragma: no cover - set together in begin()
            raise RuntimeError("shutdown begun without its facts")
        return self._shutdown
