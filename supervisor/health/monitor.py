"""Health checks from the configuration: probe, count, act.

One task per check.  A check of a process probes only while that process
is RUNNING (ready), once every ``period``; a new run of the process starts
the count again.  ``threshold`` failures in a row make the check down and
trigger its action once: ``restart`` ends the run and lets the restart
policy start it again through its backoff (so a process that never gets
healthy ends FAILED like a crash loop), ``shutdown`` brings the container
down (exit status 70), ``ignore`` only reports it.  A success makes it up
again.  The probes are the readiness probes (``supervisor.runtime.readiness``).
Every check stops when the shutdown begins: nothing is restarted then.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping

import trio

from .._deadline import Deadline
from .._units import format_duration
from ..config import Config, HealthCheck
from ..runtime import SupervisedProcess
from ..runtime.readiness import ReadyProbe, describe
from ..runtime.state import ProcessState
from .board import Board, CheckState

__all__ = ["HealthMonitor"]

log = logging.getLogger("supervisor.health")


class HealthMonitor:
    def __init__(
        self,
        config: Config,
        processes: Mapping[str, SupervisedProcess],
        board: Board,
        *,
        fail: Callable[[str], None],
    ) -> None:
        self.config = config
        self.processes = processes
        self.board = board
        self._fail = fail
        for check in config.health.checks:
            board.add(CheckState(name=check.name, level=check.level, process=check.process, threshold=check.threshold))

    async def run(self) -> None:
        """Run every check until cancelled (the shutdown cancels it)."""
        async with trio.open_nursery() as nursery:
            for check in self.config.health.checks:
                nursery.start_soon(self._run_check, check)

    async def _run_check(self, check: HealthCheck) -> None:
        process = self.processes.get(check.process) if check.process else None
        spec = process.spec if process is not None else None
        env = {**os.environ, **spec.env} if spec is not None else None
        probe = ReadyProbe(
            check.probe, env=env, cwd=spec.cwd if spec is not None else None, probe_timeout=check.timeout
        )
        state = self.board.checks[check.name]
        run: int | None = None
        while True:
            if check.process:
                # Looked up each time: `supervisor replan` may have replaced
                # the process (a new object) or removed it (None: idle).
                process = self.processes.get(check.process)
            if check.process and (process is None or process.state is not ProcessState.RUNNING):
                if state.up is not None or state.failures:
                    self.board.reset(check.name)
                run = None
                await trio.sleep(check.period)
                continue
            if process is not None and process.pid != run:
                run = process.pid  # a new run: count from zero
                self.board.reset(check.name)
            failure = await self._probe_once(probe, check)
            was_down = state.down
            self.board.result(check.name, failure is None, failure or "")
            if failure is None and was_down:
                log.info("health check %s passes again (%s)", check.name, describe(check.probe))
            elif failure is not None and state.down and state.failures == check.threshold:
                await self._act(check, process, failure)
            await trio.sleep(check.period)

    async def _probe_once(self, probe: ReadyProbe, check: HealthCheck) -> str | None:
        # Each kind of probe ends itself at check.timeout and says how;
        # this scope only catches what might still linger (a thread's
        # DNS lookup, say).
        with trio.move_on_after(check.timeout + 0.5):
            return await probe.probe()
        return f"no answer within {format_duration(check.timeout)}"

    async def _act(self, check: HealthCheck, process: SupervisedProcess | None, failure: str) -> None:
        what = f"health check {check.name} failed {check.threshold} time(s) in a row ({failure})"
        if check.on_failure == "shutdown":
            self._fail(what)
        elif check.on_failure == "restart" and process is not None:
            budget = process.spec.stop_timeout if process.spec.stop_timeout is not None else self.config.grace_period
            await process.restart_run(Deadline(budget, reserve=0.0), what)
            # The restart policy has it now; the new run is probed afresh.
            # (Left "down", /livez would have the kubelet restart the whole
            # container for what the supervisor is already repairing.)
            self.board.reset(check.name)
        else:
            log.warning("%s; on_failure: ignore", what)
