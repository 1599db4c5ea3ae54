"""One supervised process: its runs, one after another, by its restart policy.

``SupervisedProcess`` is the conductor and the public view
(``supervisor.ProcessInfo``); each part of the job is elsewhere, in a module
of its own:

- ``run``: one OS process, from spawn until reaped, and stopping it;
- ``gate``: whether a run became ready, and probing for it;
- ``restart``: after a run ends, restart (after which delay), or not;
- ``state``: the one transition table every state change goes through.

The state is the authority on what is going on: a stop request looks at it,
not at whether an OS process happens to be alive, so a stop that lands
while a run is being spawned, or between its exit and the supervising
task's next step, always ends in STOPPED.
"""

from __future__ import annotations

import logging
import time
from typing import Protocol

import trio

from .._deadline import Deadline
from .._status import ExitStatus
from .._units import format_duration
from ..config import ProcessSpec
from .backoff import RestartTracker
from .child import AlreadyStarted
from .gate import ReadyGate, probe_readiness
from .restart import after_exit
from .run import Run
from .state import Lifecycle, ProcessState

__all__ = ["ProcessEvents", "SupervisedProcess"]

log = logging.getLogger("supervisor.process")


class ProcessEvents(Protocol):
    """What the orchestrator hears from a process."""

    def process_started(self, process: SupervisedProcess) -> None: ...

    def process_exited(self, process: SupervisedProcess, status: ExitStatus, will_restart: bool) -> None: ...

    def process_restarted(self, process: SupervisedProcess, attempt: int) -> None: ...

    def process_failed(self, process: SupervisedProcess, reason: str) -> None: ...


class SupervisedProcess:
    """Implements the public ``supervisor.ProcessInfo`` view."""

    def __init__(
        self,
        spec: ProcessSpec,
        events: ProcessEvents,
        *,
        inherited_fds: tuple[int, ...] = (),
        already_started: AlreadyStarted | None = None,
        stop_budget: float = 30.0,
    ) -> None:
        self.spec = spec
        # How long stopping a run that never became ready may take when the
        # process has no stop_timeout (the orchestrator's grace period).
        self._stop_budget = stop_budget
        self._events = events
        self._inherited_fds = inherited_fds
        # The main process may have been started before trio was imported
        # (supervisor._run.prespawn_main); its first run adopts it.
        self._already_started = already_started
        self.started_early = already_started is not None
        self.supervised = False
        self._lifecycle = Lifecycle(spec.name)
        self._run: Run | None = None
        self._gate = ReadyGate()
        # How the run before the current one ended (the current one's status
        # counts once it has ended).
        self._previous_status: ExitStatus | None = None
        self._run_over = trio.Event()
        self._stop_requested = trio.Event()
        self._restart_requested = False
        # Why the current run was stopped for not becoming ready in time.
        self._never_ready: str | None = None
        self.restarts = 0
        self.ever_started = False
        self.started_at: float | None = None  # monotonic time of the last spawn
        self.tracker: RestartTracker | None = None

    # -- ProcessInfo --------------------------------------------------------

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def state(self) -> ProcessState:
        return self._lifecycle.state

    @property
    def state_since(self) -> float:
        """When the process entered its state (``time.monotonic()``)."""
        return self._lifecycle.since

    @property
    def pid(self) -> int | None:
        return self._run.pid if self._run is not None else None

    @property
    def running(self) -> bool:
        return self._run is not None and self._run.alive

    @property
    def status(self) -> ExitStatus | None:
        """How the last run that ended ended; None if none has."""
        run = self._run
        if run is not None and run.status is not None:
            return run.status
        return self._previous_status

    @property
    def stopping(self) -> bool:
        return self._stop_requested.is_set()

    def __repr__(self) -> str:
        return f"<process {self.name} {self.state.value} pid={self.pid} status={self.status}>"

    # -- supervising ----------------------------------------------------------

    async def supervise(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run the process and restart it by its policy until it is stopped or
        fails for good.  Signals ``task_status.started()`` once the first
        spawn has been attempted (check ``running`` for its success)."""
        self.supervised = True
        # A new supervision (the first, or `supervisor start` after a stop)
        # starts with no stop pending and a fresh backoff sequence.
        self._stop_requested = trio.Event()
        self._restart_requested = False  # (one a stop overtook is void)
        self.tracker = tracker = RestartTracker(self.spec.backoff)
        while True:
            tracker.started(trio.current_time())
            # Set once this loop has acted on the run's end (moved the state
            # on), so that a stop returns with the state it leads to; also
            # if this task is cancelled meanwhile.
            self._run_over = run_over = trio.Event()
            try:
                status = await self._run_once(task_status)
                delay = self._after_run(status, tracker)
            finally:
                run_over.set()
            task_status = trio.TASK_STATUS_IGNORED  # (started once, by the first run)
            if delay is None:
                return
            log.info("restarting %s in %s (%s)", self.name, format_duration(delay), status)
            # A stop during the backoff simply ends it: no restart.
            with trio.move_on_after(delay):
                await self._stop_requested.wait()
            if self._stop_requested.is_set():
                self._lifecycle.settle_in(ProcessState.STOPPED)
                return
            self.restarts += 1
            self._events.process_restarted(self, tracker.attempt)

    def _after_run(self, status: ExitStatus, tracker: RestartTracker) -> float | None:
        """Move the state on from a run that ended, and say so; the delay
        before the next run, None if there is none."""
        if self.stopping:
            self._lifecycle.settle_in(ProcessState.STOPPED)
            return None
        never_ready, self._never_ready = self._never_ready, None
        if never_ready is not None:
            # A run that never became ready is a failure of its own, not a
            # crash for the restart policy: it ends in FAILED, which says so
            # in `supervisor status`, and `supervisor start` starts it anew.
            self._lifecycle.enter(ProcessState.FAILED)
            self._events.process_exited(self, status, will_restart=False)
            self._events.process_failed(self, never_ready)
            return None
        requested, self._restart_requested = self._restart_requested, False
        verdict = after_exit(self.spec, status, tracker, trio.current_time(), restart_requested=requested)
        self._lifecycle.enter(verdict.state)
        will_restart = verdict.state is ProcessState.BACKOFF
        self._events.process_exited(self, status, will_restart=will_restart)
        if verdict.failure is not None:
            self._events.process_failed(self, verdict.failure)
        return verdict.delay if will_restart else None

    async def _run_once(self, task_status: trio.TaskStatus[None]) -> ExitStatus:
        self._previous_status = self.status
        run = self._run = Run(self.spec)
        gate = self._gate = ReadyGate(on_ready=self._became_ready)
        self._lifecycle.enter(ProcessState.STARTING)
        already_started, self._already_started = self._already_started, None
        if not await run.spawn(self._inherited_fds, already_started):
            assert run.status is not None
            gate.settle(f"could not be started ({run.status})")
            task_status.started()
            return run.status
        self.ever_started = True
        self.started_at = time.monotonic()
        if self.spec.ready is None:
            gate.settle(None)
        self._events.process_started(self)
        task_status.started()
        async with trio.open_nursery() as nursery:
            if self.spec.ready is not None:
                nursery.start_soon(self._probe, run, gate)
            status = await run.watch()
            nursery.cancel_scope.cancel()
        gate.settle(f"exited before it was ready: {status}")
        level = logging.INFO if status.success or self.stopping else logging.WARNING
        assert run.child is not None
        log.log(level, "%s (pid %d) %s", self.name, run.child.pid, status)
        return status

    async def _probe(self, run: Run, gate: ReadyGate) -> None:
        """Probe readiness beside ``run``; a run whose check does not pass
        in time is stopped (its stop signal, stop_timeout, SIGKILL) and the
        process fails, so that nothing is left STARTING with nobody probing.
        The main process is left running: its own exit decides the outcome."""
        await probe_readiness(self.spec, gate, lambda: run.alive)
        reason = await gate.wait()
        if reason is None or self.spec.main or self.stopping or not run.alive:
            return
        log.error("%s %s: stopping it", self.name, reason)
        self._never_ready = reason
        self._lifecycle.settle_in(ProcessState.STOPPING)
        await run.terminate(Deadline(self._stop_budget, reserve=0.0), self.spec.stop_signal)

    def _became_ready(self) -> None:
        # Ready while already being stopped changes nothing: STOPPING stays.
        if self.state is ProcessState.STARTING:
            self._lifecycle.enter(ProcessState.RUNNING)

    async def wait_ready(self) -> str | None:
        """Wait until the current run's readiness is settled: None when the
        process is ready, else why it never became ready (it exited first,
        or its check did not pass within its timeout)."""
        return await self._gate.wait()

    # -- signals and stopping -------------------------------------------------

    def send_signal(self, signo: int, *, group: bool | None = None) -> bool:
        """Signal the process (its group if it has its own).  False if it is
        not running."""
        return self._run is not None and self._run.send_signal(signo, group=group)

    async def stop(self, deadline: Deadline, stop_signal: int | None = None) -> ExitStatus | None:
        """Stop signal, wait up to stop_timeout within the deadline, then
        SIGKILL (the group).  Returns the final status (None if it never ran)."""
        self._stop_requested.set()
        if self.state in (ProcessState.PENDING, ProcessState.BACKOFF):
            # Never started, or between two runs: it is stopped now.
            self._lifecycle.settle_in(ProcessState.STOPPED)
            return self.status
        if not self.state.alive:
            return self.status  # exited, failed or stopped already
        return await self._terminate(deadline, stop_signal)

    async def restart_run(self, deadline: Deadline, reason: str) -> ExitStatus | None:
        """End this run the way ``stop`` would (stop signal, stop_timeout,
        SIGKILL) and let the supervising task start it again through its
        backoff: the restart policy's delays and limit apply, so a check
        that keeps failing ends in FAILED like a crash loop does."""
        if not self.running or self.stopping:
            return self.status
        log.warning("restarting %s: %s", self.name, reason)
        self._restart_requested = True
        return await self._terminate(deadline, None)

    async def _terminate(self, deadline: Deadline, stop_signal: int | None) -> ExitStatus | None:
        run, run_over = self._run, self._run_over
        assert run is not None, "an alive state without a run"
        self._lifecycle.settle_in(ProcessState.STOPPING)
        status = await run.terminate(deadline, stop_signal or self.spec.stop_signal)
        if run.ended.is_set():
            # Reaped: the supervising task moves the state on once the
            # output is drained (a bounded moment).  The caller then sees
            # STOPPED (or BACKOFF after restart_run), as `supervisor restart`
            # needs to start it again at once.
            await run_over.wait()
        return status
