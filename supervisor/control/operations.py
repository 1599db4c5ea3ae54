"""What an operator can do to a running pod, and what they can see of it.

The control socket's commands and the health answers in one place, on top
of the process state machine (``supervisor.runtime.state``): ``start`` runs
a stopped process's supervision again in the orchestrator's nursery,
``stop`` is the same stop the shutdown plan uses (stop_signal, stop_timeout,
SIGKILL), and a stopped process stays stopped until started.  Each raises
``ControlError`` with one line for the user; nothing here changes a process
while the pod is shutting down.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import trio

from .. import __version__
from .._deadline import Deadline
from .._units import parse_signal, signal_name
from ..runtime.state import ProcessState

if TYPE_CHECKING:
    from .._timeline import Timeline
    from ..config import Config
    from ..health.board import Board, Verdict
    from ..runtime import SupervisedProcess
    from .replan import Replanner

__all__ = ["ControlError", "Operations", "ShutdownView"]

log = logging.getLogger("supervisor.control")


class ControlError(Exception):
    """A request that cannot be carried out; the message is one line."""


@dataclass(frozen=True)
class ShutdownView:
    """What ``status`` shows of a shutdown under way; ``state``: the
    orchestrator's (``stopping``, or ``hurrying`` once the deadline was
    expired)."""

    reason: str
    state: str
    elapsed: float
    remaining: float


class Operations:
    def __init__(
        self,
        config: Config,
        processes: Mapping[str, SupervisedProcess],
        board: Board,
        *,
        shutdown: Callable[[], ShutdownView | None],
        timeline: Callable[[], Timeline | None],
    ) -> None:
        self.config = config
        self.processes = processes
        self.board = board
        self._shutdown = shutdown
        self._timeline = timeline
        self.nursery: trio.Nursery | None = None  # the orchestrator's supervised nursery
        self.locks = {name: trio.Lock() for name in processes}
        # When there is a file to read again: makes the Replanner, at the
        # first replan (its code stays out of an idle orchestrator's memory).
        self.make_replanner: Callable[[], Replanner] | None = None
        self._replanner: Replanner | None = None
        self.started = time.monotonic()

    # -- looking ----------------------------------------------------------------

    def lookup(self, names: Sequence[str]) -> list[SupervisedProcess]:
        if not names:
            raise ControlError("name at least one process")
        unknown = [name for name in names if name not in self.processes]
        if unknown:
            known = ", ".join(self.processes) or "none"
            raise ControlError(f"unknown process {unknown[0]!r} (processes: {known})")
        return [self.processes[name] for name in dict.fromkeys(names)]

    def shutdown(self) -> ShutdownView | None:
        return self._shutdown()

    def timeline(self) -> Timeline | None:
        return self._timeline()

    def status(self) -> dict[str, object]:
        now = time.monotonic()
        shutdown = self._shutdown()
        processes = list(self.processes.values())
        return {
            "ok": True,
            "supervisor": {
                # The init layer (PID 1 in a container), which the
                # orchestrator answering here is a child of: the PID to signal.
                "pid": os.getppid(),
                "orchestrator_pid": os.getpid(),
                "version": __version__,
                "uptime": round(now - self.started, 3),
            },
            "processes": [self._row(process, now) for process in processes],
            "checks": [state.as_dict() for state in self.board.checks.values()],
            "plugins": dict(self.board.status_lines),
            "shutdown": self._shutdown_dict(shutdown),
            "alive": self.board.alive(processes).ok,
            "ready": self.board.ready(processes, shutdown.reason if shutdown else None).ok,
        }

    def _row(self, process: SupervisedProcess, now: float) -> dict[str, object]:
        state = process.state
        tracker = process.tracker
        status = process.status
        running = state in (ProcessState.STARTING, ProcessState.RUNNING, ProcessState.STOPPING)
        return {
            "name": process.name,
            "main": process.spec.main,
            "state": state.value,
            "since": round(now - process.state_since, 3),
            "pid": process.pid,
            "uptime": round(now - process.started_at, 3) if running and process.started_at is not None else None,
            "restarts": process.restarts,
            # (A restart decided but still in its backoff is not counted yet.)
            "restarts_in_window": min(process.restarts, tracker.in_window(trio.current_time())) if tracker else 0,
            # How the last run that ended ended: for a process running
            # again, the crash it was restarted after.
            "last_exit": str(status) if status is not None else None,
            "exit_code": status.exit_code if status is not None else None,
            "readiness": _readiness(process),
            "checks": [
                {"name": check.name, "up": check.up, "failures": check.failures, "detail": check.detail}
                for check in self.board.for_process(process.name)
            ],
        }

    def _shutdown_dict(self, shutdown: ShutdownView | None) -> dict[str, object] | None:
        if shutdown is None:
            return None
        timeline = self._timeline()
        phase = timeline.steps[-1].describe() if timeline is not None and timeline.steps else "starting"
        return {
            "reason": shutdown.reason,
            "state": shutdown.state,
            "elapsed": round(shutdown.elapsed, 3),
            "deadline_left": round(max(0.0, shutdown.remaining), 3),
            "phase": phase,
        }

    def health(self, level: str) -> Verdict:
        processes = list(self.processes.values())
        if level == "alive":
            return self.board.alive(processes)
        shutdown = self._shutdown()
        return self.board.ready(processes, shutdown.reason if shutdown else None)

    # -- acting -------------------------------------------------------------------

    def _refuse_during_shutdown(self, what: str) -> None:
        shutdown = self._shutdown()
        if shutdown is not None:
            raise ControlError(f"cannot {what}: the supervisor is shutting down ({shutdown.reason})")

    async def start(self, names: Sequence[str]) -> list[str]:
        processes = self.lookup(names)
        self._refuse_during_shutdown("start")
        self._refuse_pending(processes)
        return await self._each(processes, self._start_one)

    async def _each(
        self, processes: Sequence[SupervisedProcess], act: Callable[[SupervisedProcess], Awaitable[str]]
    ) -> list[str]:
        """One process after the other, each under its lock (two requests
        for one process never interleave)."""
        messages = []
        for process in processes:
            async with self.locks[process.name]:
                messages.append(await act(process))
        return messages

    async def _start_one(self, process: SupervisedProcess) -> str:
        if not process.state.final:
            return f"{process.name} is already {process.state.value} (pid {process.pid})"
        self._refuse_during_shutdown("start")
        assert self.nursery is not None
        log.info("starting %s (asked over the control socket)", process.name)
        await self.nursery.start(process.supervise)
        reason = await process.wait_ready()
        if reason is not None:
            raise ControlError(f"{process.name} did not start: {reason}")
        return f"{process.name} started (pid {process.pid})"

    async def stop(self, names: Sequence[str]) -> list[str]:
        processes = self.lookup(names)
        self._refuse_during_shutdown("stop")
        self._refuse_main(processes, "stop")
        return await self._each(processes, self._stop_one)

    async def _stop_one(self, process: SupervisedProcess) -> str:
        if process.state.final:
            return f"{process.name} is already {process.state.value}"
        self._refuse_during_shutdown("stop")
        log.info("stopping %s (asked over the control socket)", process.name)
        # Its own stop_timeout, else the grace period: what a shutdown
        # would give it at most.
        budget = process.spec.stop_timeout if process.spec.stop_timeout is not None else self.config.grace_period
        status = await process.stop(Deadline(budget, reserve=0.0))
        return f"{process.name} stopped ({status})" if status is not None else f"{process.name} stopped"

    async def restart(self, names: Sequence[str]) -> list[str]:
        processes = self.lookup(names)
        self._refuse_during_shutdown("restart")
        self._refuse_main(processes, "restart")
        self._refuse_pending(processes)
        return await self._each(processes, self._restart_one)

    async def _restart_one(self, process: SupervisedProcess) -> str:
        if not process.state.final:
            await self._stop_one(process)
        return (await self._start_one(process)).replace(" started ", " restarted ", 1)

    async def replan(self, *, dry_run: bool) -> dict[str, object]:
        """``supervisor replan`` (see ``supervisor.control.replan``)."""
        if self.make_replanner is None:
            raise ControlError("nothing to replan: the supervisor was started without a configuration file (-c)")
        self._refuse_during_shutdown("replan")
        waiting = [p.name for p in self.processes.values() if p.state is ProcessState.PENDING]
        if waiting:
            # Start-up walks the start levels it began with: a replan now
            # would race it.
            raise ControlError(f"cannot replan yet: start-up is not over ({', '.join(waiting)} not started)")
        if self._replanner is None:
            self._replanner = self.make_replanner()
        answer = await self._replanner.replan(dry_run=dry_run)
        self.config = self._replanner.pod.config
        return answer

    def _refuse_pending(self, processes: Sequence[SupervisedProcess]) -> None:
        for process in processes:
            if process.state is ProcessState.PENDING:
                raise ControlError(f"{process.name} has not been started yet: it waits for its dependencies")

    def _refuse_main(self, processes: Sequence[SupervisedProcess], what: str) -> None:
        for process in processes:
            if process.spec.main:
                raise ControlError(
                    f"cannot {what} {process.name}: it is the main process, whose exit ends the container "
                    f"(send SIGTERM to PID 1 to shut down, or `supervisor signal {process.name} SIGNAL`)"
                )

    def signal(self, name: str, signal_text: str) -> str:
        (process,) = self.lookup([name])
        try:
            signo = parse_signal(signal_text)
        except ValueError as exc:
            raise ControlError(f"bad signal {signal_text!r}: {exc}") from None
        if not process.send_signal(signo):
            raise ControlError(f"{process.name} is not running ({process.state.value}): nothing to signal")
        where = "the process group of " if process.spec.process_group else ""
        log.info("sent %s to %s%s (asked over the control socket)", signal_name(signo), where, process.name)
        return f"sent {signal_name(signo)} to {where}{process.name} (pid {process.pid})"


def _readiness(process: SupervisedProcess) -> str:
    check = process.spec.ready
    state = process.state
    if state is ProcessState.RUNNING or (state is ProcessState.STOPPING and process.ever_started):
        return "ready"
    if state is ProcessState.STARTING:
        return "waiting" if check is not None else "starting"
    return "-"
