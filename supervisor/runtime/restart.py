"""The restart policy: after a run ends, what becomes of the process.

Pure decisions on what already happened (how the run ended, the policy, the
restarts so far), no waiting and no clock of its own, so every case can be
checked without a process.  The delays themselves are ``backoff``'s
arithmetic.
"""

from __future__ import annotations

from dataclasses import dataclass

from .._status import ExitStatus
from .._units import format_duration
from ..config import ProcessSpec
from .backoff import RestartTracker
from .state import ProcessState

__all__ = ["AfterExit", "after_exit"]


@dataclass(frozen=True, slots=True)
class AfterExit:
    """``state``: BACKOFF (start again after ``delay`` seconds), EXITED, or
    FAILED (``failure`` says why, for the log and ``process_failed``)."""

    state: ProcessState
    delay: float = 0.0
    failure: str | None = None


def after_exit(
    spec: ProcessSpec, status: ExitStatus, tracker: RestartTracker, now: float, *, restart_requested: bool
) -> AfterExit:
    """Decide for a run that ended by itself at ``now`` (trio time) or was
    stopped to be restarted (``restart_requested``: a failing health check).
    A run stopped on request never gets here: it is simply STOPPED."""
    # A requested restart goes through the backoff and its limit whatever
    # the policy says, so a check that keeps failing ends in FAILED like a
    # crash loop does.
    wanted = restart_requested or spec.restart == "always" or (spec.restart == "on-failure" and not status.success)
    if not wanted:
        # The main process's exit ends the container, whatever its code: it
        # has exited, not failed; any other process that fails stays FAILED.
        if status.success or spec.main:
            return AfterExit(ProcessState.EXITED)
        return AfterExit(ProcessState.FAILED, failure=f"exited: {status}")
    delay = tracker.next_delay(now)
    if delay is None:
        return AfterExit(
            ProcessState.FAILED,
            failure=(
                f"{status}; restarted {tracker.attempt} times within {format_duration(spec.backoff.window)}, giving up"
            ),
        )
    return AfterExit(ProcessState.BACKOFF, delay=delay)
