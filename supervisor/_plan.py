"""The shutdown plan: ordered phases against one deadline.

1. ``shutdown_started`` hooks: learn the real deadline (briefly).
2. ``pre_stop`` hooks, concurrently; cancelled if the main process exits.
   ``wind_down`` hooks alongside them, never cut short by that exit.
3. Processes, one dependency level at a time in reverse start order, a
   level's processes concurrently: ``before_process_stop`` hooks → stop
   signal → wait (stop_timeout, capped by the deadline) → SIGKILL →
   ``after_process_stop`` hooks.  The time plugins kept back from the hooks
   of 2 (``Deadline.keep_for_later``) is free again here, and once no
   process is left to stop, so is the deadline's reserve.
4. ``post_stop`` hooks.

The orchestrator then exits and the init layer sweeps survivors.  Every step
is recorded in the timeline.
"""

from __future__ import annotations

import logging
import signal
from collections.abc import Sequence
from typing import Any

import trio

from ._deadline import Deadline
from ._hooks import HookRunner
from ._phase import Phase
from ._timeline import Timeline
from .runtime import SupervisedProcess
from .runtime.state import ProcessState

__all__ = ["ShutdownPlan"]

log = logging.getLogger("supervisor.plan")

# shutdown_started hooks only read something (the pod, say); they must not
# eat into the budget the later steps need.
_SHUTDOWN_STARTED_LIMIT = 5.0


class ShutdownPlan:
    def __init__(
        self,
        host: HookRunner,
        levels: Sequence[Sequence[SupervisedProcess]],
        timeline: Timeline,
        main_exited: trio.Event,
    ) -> None:
        self.host = host
        self.levels = levels
        self.timeline = timeline
        self.main_exited = main_exited

    async def run(self, deadline: Deadline, reason: str, main_stop_signal: int | None = None) -> None:
        deadline.stop_time = sum(
            max((process.spec.stop_timeout or 0.0 for process in level), default=0.0) for level in self.levels
        )
        with trio.move_on_after(_SHUTDOWN_STARTED_LIMIT):
            await self._call(Phase.SHUTDOWN_STARTED, deadline, reason=reason)
        # wind_down beside pre_stop: processes stop once both are over.
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._wind_down, deadline)
            await self._pre_stop(deadline)
        # What plugins kept back from those hooks is for the steps after the stops.
        deadline.hand_back()
        for level in reversed(self.levels):
            async with trio.open_nursery() as nursery:
                for process in level:
                    nursery.start_soon(self._stop_process, process, deadline, main_stop_signal)
        await self._call(Phase.POST_STOP, deadline)

    async def _call(self, phase: Phase, deadline: Deadline, **arguments: Any) -> None:
        """The phase's hook, each implementation a step of the phase in the timeline."""
        await self.host.call(phase.hook, deadline=deadline, phase=phase, **arguments)

    async def _pre_stop(self, deadline: Deadline) -> None:
        if not self.host.implementations(Phase.PRE_STOP.hook):
            return
        if self.main_exited.is_set():
            with self.timeline.step(Phase.PRE_STOP, "hooks not run") as step:
                step.outcome = "skipped"
                step.detail = "the main process has already exited: nothing left to drain"
            return
        async with trio.open_nursery() as nursery:

            async def cancel_when_main_exits() -> None:
                await self.main_exited.wait()
                log.info("main process exited: cancelling pre_stop hooks")
                nursery.cancel_scope.cancel()

            nursery.start_soon(cancel_when_main_exits)
            await self._call(Phase.PRE_STOP, deadline)
            nursery.cancel_scope.cancel()

    def _left_to_stop(self) -> bool:
        """Whether a process still runs or may run again (starting, or
        waiting to restart), and so still needs its stop."""
        return any(
            process.running or process.state in (ProcessState.STARTING, ProcessState.BACKOFF)
            for level in self.levels
            for process in level
        )

    async def _wind_down(self, deadline: Deadline) -> None:
        # Work that must end before the processes stop whatever the main
        # process does (guests of a libvirtd outside the pod): the main
        # process's exit neither cancels nor skips it; the deadline bounds it.
        await self._call(Phase.WIND_DOWN, deadline)

    async def _stop_process(self, process: SupervisedProcess, deadline: Deadline, main_stop_signal: int | None) -> None:
        if process.running:
            await self._call(Phase.BEFORE_PROCESS_STOP, deadline, step_name=process.name, process=process)
        was_running = process.running
        with self.timeline.step(Phase.STOP, process.name) as step:
            status = await process.stop(deadline, main_stop_signal if process.spec.main else None)
            if not was_running:
                step.outcome = "skipped"
                step.detail = f"already {status}" if status else "never started"
            elif status is not None and status.signal == signal.SIGKILL:
                step.outcome = "killed"
                step.detail = "did not exit in time: escalated to SIGKILL"
            else:
                step.detail = str(status)
        if not self._left_to_stop():
            # No stop signal or SIGKILL is still to come: the hooks after
            # the last stop (a Lease to hand over) may use the reserve too.
            deadline.nothing_left_to_stop()
        if status is not None and process.ever_started:
            await self._call(Phase.AFTER_PROCESS_STOP, deadline, step_name=process.name, process=process, status=status)
