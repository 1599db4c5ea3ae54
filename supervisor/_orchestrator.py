"""The orchestrator: the trio program that runs a deployment.

Start processes in dependency order (each level after the previous one is
ready), run background hooks, wait for a trigger — SIGTERM/SIGINT, the main
process exiting, a process failing for good — then execute the shutdown plan
and return the exit code.  Signals arrive from the init layer; everything
else forwardable goes on to the main process.
"""

from __future__ import annotations

import logging
import signal
import time
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING

import trio

from ._deadline import Deadline
from ._log import LogSettings
from ._logging import configure_logging
from ._phase import Phase
from ._plan import ShutdownPlan
from ._shutdown import Shutdown, ShutdownTracker
from ._status import ExitStatus
from ._timeline import Step, Timeline
from ._units import PIPE_RELAY, format_duration, signal_name
from .config import Config, ProcessSpec, start_levels
from .control.service import Services
from .pid1.early import ORCHESTRATOR_SIGNALS
from .pid1.exits import ExitCode
from .pid1.protocol import Log, MainPid, Reached, ShutdownSignals, StatusPipe
from .pid1.state import ShutdownState, wall_margin
from .runtime import SupervisedProcess
from .runtime.output import install_std_streams
from .runtime.spawn import raise_open_files_limit

if TYPE_CHECKING:
    from ._hooks import HookRunner
    from .pid1.early import EarlySignals
    from .runtime.child import AlreadyStarted

__all__ = ["Orchestrator", "run_orchestrator"]

log = logging.getLogger("supervisor")


def run_orchestrator(  # noqa: PLR0913 - each is one fact of the start, passed on once
    config: Config,
    host: HookRunner,
    *,
    early: EarlySignals,
    status: StatusPipe | None = None,
    inherited_fds: tuple[int, ...] = (),
    main_started: AlreadyStarted | None = None,
    reload: Callable[[], Config] | None = None,
) -> int:
    # From here on no write to stdout/stderr can block the event loop.
    install_std_streams()
    # After the main process's early start, which so keeps the runtime's limit.
    raise_open_files_limit()
    configure_logging(LogSettings(config.log_format, config.log_level))
    status = status or StatusPipe(None)
    status.send(Log(config.log_format, config.log_level))
    orchestrator = Orchestrator(
        config, host, early=early, inherited_fds=inherited_fds, main_started=main_started, status=status
    )
    if reload is not None:
        orchestrator.allow_replan(reload)
    return trio.run(orchestrator.run)


class Orchestrator:
    def __init__(
        self,
        config: Config,
        host: HookRunner,
        *,
        early: EarlySignals | None = None,
        inherited_fds: tuple[int, ...] = (),
        main_started: AlreadyStarted | None = None,
        status: StatusPipe | None = None,
    ) -> None:
        self.config = config
        self.host = host
        self._inherited_fds = inherited_fds
        # Reads the file again for `supervisor replan` (the command line's
        # options applied on top); None: nothing to re-read.
        self._reload: Callable[[], Config] | None = None
        # PID 1 hears of the wall and the phases here (see pid1/protocol.py).
        self.status = status or StatusPipe(None)
        self.early = early
        self.processes = {
            spec.name: self.new_process(spec, already_started=main_started if spec.main else None)
            for spec in config.processes
        }
        self.levels = self._levels(config)
        self.main = next((p for p in self.processes.values() if p.spec.main), None)
        self.main_exited = trio.Event()
        # RUNNING until the first trigger; then the shutdown's facts too.
        # PID 1 follows each move (its wall line names the state reached).
        self._shutdown = ShutdownTracker(on_move=self._report_state)
        # Signals (received, to deliver) that came before the main process ran.
        self._queued_signals: list[tuple[int, int]] = []
        self.failure: str | None = None
        # Bound to the plugin host from the start; its origin becomes the
        # shutdown's start when the plan runs (no step is recorded before).
        self.timeline = Timeline(origin=0.0, on_step=self._step_in_progress)
        self._events_nursery: trio.Nursery | None = None
        self._start_up_scope: trio.CancelScope | None = None
        # Control socket, health checks, probe listener (supervisor/control).
        self.services = Services(self, fail=self._fail)

    @property
    def shutdown_state(self) -> ShutdownState:
        return self._shutdown.state

    @property
    def shutdown(self) -> Shutdown | None:
        """The shutdown under way (its reason, its deadline); None while RUNNING."""
        return self._shutdown.current

    def _levels(self, config: Config) -> list[list[SupervisedProcess]]:
        return [[self.processes[spec.name] for spec in level] for level in start_levels(config)]

    # -- Replannable (supervisor/control/replan.py) ----------------------------------

    def new_process(self, spec: ProcessSpec, already_started: AlreadyStarted | None = None) -> SupervisedProcess:
        return SupervisedProcess(
            spec,
            self,
            inherited_fds=self._inherited_fds,
            already_started=already_started,
            stop_budget=self.config.grace_period,
        )

    def allow_replan(self, reload: Callable[[], Config]) -> None:
        """``supervisor replan`` reads the configuration again with ``reload``."""
        self._reload = reload
        self.services.allow_replan(self)

    def reload_config(self) -> Config:
        if self._reload is None:
            raise RuntimeError("reload_config() without a file to re-read")
        return self._reload()

    def adopt(self, config: Config) -> None:
        if config.grace_period != self.config.grace_period:
            # PID 1's wall follows (supervisor/pid1/protocol.py).
            self.status.grace(config.grace_period)
        if config.shutdown_signals != self.config.shutdown_signals:
            self.status.send(ShutdownSignals(config.shutdown_signals))
        self.config = config
        self.levels = self._levels(config)

    # -- the program ----------------------------------------------------------

    async def run(self) -> int:
        self.host.bind(self.config, self.processes, self.timeline, self.main_exited, board=self.services.board)
        async with trio.open_nursery() as root:
            self._events_nursery = root
            with trio.open_signal_receiver(*ORCHESTRATOR_SIGNALS) as signals:
                async with trio.open_nursery() as supervised:
                    # Up before any process starts, so that `supervisor
                    # status` works during start-up; ends with the root.
                    await root.start(self.services.run, supervised)
                    # A main process started before trio (_run.prespawn_main)
                    # is taken under supervision before any signal is
                    # handled, so that signals reach it and a stop finds it.
                    for process in self.processes.values():
                        if process.started_early:
                            with trio.CancelScope(shield=True):
                                await supervised.start(process.supervise)
                    # Signals that arrived while we were importing.
                    for signo, arrived in self.early.take() if self.early else ():
                        self._on_signal(signo, since=time.monotonic() - arrived)
                    root.start_soon(self._receive_signals, signals)
                    await self._start_up(supervised)
                    background = trio.CancelScope()
                    root.start_soon(self._run_background, background)
                    root.start_soon(self.services.run_checks, self._shutdown.begun)
                    shutdown = await self._shutdown.wait()
                    background.cancel()
                    await self._shut_down(shutdown)
                    # Every process has exited (or was killed and reaped).
                    supervised.cancel_scope.cancel()
            root.cancel_scope.cancel()
        return self._exit_code()

    async def _start_up(self, supervised: trio.Nursery) -> None:
        # A shutdown request cancels this scope (see request_shutdown): the
        # levels not yet started are never started.
        with trio.CancelScope() as self._start_up_scope:
            if self.shutdown_state.shutting_down:
                self._start_up_scope.cancel()
            await self.host.call(Phase.STARTUP.hook)
            if not self.processes:
                log.info("no processes to run: waiting for SIGTERM (plugins keep running until then)")
            for level in self.levels:
                if not await self._start_level(supervised, level):
                    break
        if self._start_up_scope.cancelled_caught and self.shutdown is not None:
            log.info("start-up interrupted: %s", self.shutdown.reason)

    async def _start_level(self, supervised: trio.Nursery, level: list[SupervisedProcess]) -> bool:
        for process in level:
            if self.shutdown_state.shutting_down:
                return False
            if process.supervised:
                continue  # started early, already supervised
            # Shielded: once asked to spawn, a process is always registered
            # with its supervising task, or nobody would ever reap it.
            with trio.CancelScope(shield=True):
                await supervised.start(process.supervise)
        problems: dict[str, str] = {}
        async with trio.open_nursery() as nursery:
            for process in level:

                async def check(process: SupervisedProcess = process) -> None:
                    reason = await process.wait_ready()
                    if reason:
                        problems[process.name] = reason

                nursery.start_soon(check)
        return not self._start_failures(problems)

    def _start_failures(self, problems: dict[str, str]) -> bool:
        """Act on the processes of a level that did not become ready (by
        name, why); True if start-up cannot go on."""
        blocking = False
        for name, reason in problems.items():
            spec = self.processes[name].spec
            if spec.main:
                continue  # the main process's own exit decides the outcome
            dependents = [p.name for p in self.processes.values() if name in p.spec.depends_on]
            if spec.on_failure == "shutdown":
                self._fail(f"start-up failed: {name} {reason}")
            elif dependents:
                self._fail(
                    f"start-up failed: {name} {reason}, and {', '.join(dependents)} cannot start without it",
                    policy=f"on_failure: ignore, but {name} is a dependency",
                )
            else:
                continue  # failed, logged, and left so (on_failure: ignore)
            blocking = True
        return blocking

    async def _run_background(self, scope: trio.CancelScope) -> None:
        with scope:
            await self.host.call("supervisor_background")

    async def _shut_down(self, shutdown: Shutdown) -> None:
        plan = ShutdownPlan(self.host, self.levels, self.timeline, self.main_exited)
        self.timeline.origin = shutdown.deadline.started
        await plan.run(shutdown.deadline, shutdown.reason, shutdown.main_stop_signal)
        self._log_timeline(shutdown)

    # -- triggers -------------------------------------------------------------

    def request_shutdown(
        self, reason: str, main_stop_signal: int | None = None, since: float = 0.0, signo: int | None = None
    ) -> None:
        """Start the shutdown (RUNNING → STOPPING), unless it has begun;
        ``since``: how long ago its trigger arrived."""
        if self.shutdown_state.shutting_down:
            return
        grace = self.config.grace_period
        deadline = Deadline(
            grace,
            elapsed=since,
            margin=wall_margin(grace),
            on_wall=self.status.wall_in,
            # STOPPING → HURRYING: a second stop signal, or a plugin's expire().
            on_expire=self._shutdown.hurry,
        )
        self._shutdown.begin(Shutdown(reason, trio.current_time() - since, deadline, signo, main_stop_signal))
        deadline.announce()
        log.info("shutting down: %s (grace period %s)", reason, format_duration(grace))
        if self._start_up_scope is not None:
            self._start_up_scope.cancel()

    async def _receive_signals(self, signals: AsyncIterator[int]) -> None:
        async for signo in signals:
            self._on_signal(signo)

    def _on_signal(self, signo: int, since: float = 0.0) -> None:
        if signo == PIPE_RELAY:
            signo = signal.SIGPIPE
        target = self.config.rewrite.get(signo, signo)
        if target == 0:
            # Dropped before anything else looks at it: a dropped SIGINT is
            # not a second stop signal either.
            log.debug("received %s: dropped (--rewrite)", signal_name(signo))
            return
        if signo in self.config.shutdown_signals:
            if self.shutdown is not None:
                log.warning("received %s again: escalating to SIGKILL now", signal_name(signo))
                self.shutdown.deadline.expire(f"second {signal_name(signo)}")
                return
            # The main process gets its configured stop signal for SIGTERM,
            # SIGINT itself for SIGINT (Ctrl-C → 130, as with tini), and
            # whatever --rewrite says, if it says anything.
            explicit = signo in self.config.rewrite or signo == signal.SIGINT
            self.request_shutdown(
                f"received {signal_name(signo)}",
                main_stop_signal=target if explicit else None,
                # From when PID 1 received it, where its wall starts too.
                since=max(since, self.status.stop_signal_since()),
                signo=signo,
            )
            return
        self._forward(signo, target)

    def _forward(self, received: int, target: int) -> None:
        if self.main is not None and not self.main.ever_started and not self.shutdown_state.shutting_down:
            # The main process is not running yet (start-up): keep the signal
            # and deliver it once it runs, in order, as tini and dumb-init
            # would have (they start it before they look at signals).
            log.debug("received %s before %s runs: queued", signal_name(received), self.main.name)
            self._queued_signals.append((received, target))
            return
        recipients = [self.main] if self.main else list(self.processes.values())
        rewritten = f" as {signal_name(target)}" if target != received else ""
        for process in recipients:
            delivered = process.send_signal(target, group=self.config.forward_to_group)
            where = "process group of " if self.config.forward_to_group else ""
            if delivered:
                log.debug(
                    "forwarded %s%s to %s%s (pid %s)",
                    signal_name(received),
                    rewritten,
                    where,
                    process.name,
                    process.pid,
                )
            else:
                log.info("received %s: %s is not running, not forwarded", signal_name(received), process.name)

    # -- ProcessEvents ----------------------------------------------------------

    def process_started(self, process: SupervisedProcess) -> None:
        self._fire("supervisor_process_started", process=process)
        if process is self.main and self._queued_signals:
            queued, self._queued_signals = self._queued_signals, []
            for received, target in queued:
                self._forward(received, target)
        if process is self.main and process.pid is not None:
            # From now on PID 1 forwards the main process's signals itself.
            self.status.send(MainPid(process.pid))

    def process_exited(self, process: SupervisedProcess, status: ExitStatus, will_restart: bool) -> None:
        if process is self.main:
            self.status.send(MainPid(0))
        self._fire("supervisor_process_exited", process=process, status=status)
        if process.spec.main and not will_restart and not process.stopping:
            self.main_exited.set()
            self.request_shutdown(f"main process {process.name} {status}")
        elif process.spec.main and not will_restart:
            self.main_exited.set()

    def process_restarted(self, process: SupervisedProcess, attempt: int) -> None:
        self._fire("supervisor_process_restarted", process=process, attempt=attempt)

    def process_failed(self, process: SupervisedProcess, reason: str) -> None:
        if process.spec.main:
            log.error("main process %s failed: %s", process.name, reason)
            self.main_exited.set()
            self.request_shutdown(f"main process {process.name} failed")
            return
        if process.spec.on_failure == "ignore":
            log.error("%s failed: %s; leaving it failed (on_failure: ignore)", process.name, reason)
            return
        self._fail(f"{process.name} failed: {reason}")

    def _fail(self, reason: str, policy: str = "on_failure: shutdown") -> None:
        """Shut down for a failure; ``policy`` says which setting asked for it."""
        if self.failure is None:
            # (A failure seen twice — at start-up and when its run ends — is told once.)
            log.error("%s; shutting down (%s)", reason, policy)
            self.failure = reason
        self.request_shutdown(reason)

    def _report_state(self, state: ShutdownState) -> None:
        self.status.send(Reached(state))

    def _step_in_progress(self, step: Step, running: bool) -> None:
        """Tell the init layer which step the shutdown is in (see Timeline.on_step)."""
        self.status.phase(step.describe() if running else f"after {step.describe()}")

    def _fire(self, hook: str, **kwargs: object) -> None:
        if self._events_nursery is not None:
            self.host.start_soon(self._events_nursery, hook, **kwargs)

    # -- the end ------------------------------------------------------------------

    def _exit_code(self) -> int:
        if self.failure is not None:
            log.error("exit status %d: %s", ExitCode.PROCESS_FAILED, self.failure)
            return ExitCode.PROCESS_FAILED
        if self.main is None:
            reason = self.shutdown.reason if self.shutdown is not None else "no shutdown"
            log.info("exiting with status 0 (no main process; %s)", reason)
            return ExitCode.OK
        status = self.main.status
        if status is None and self.shutdown is not None and self.shutdown.signal is not None:
            # Stopped before the main process was started: report it the way
            # the main process would have ended, killed by that signal.
            status = ExitStatus(signal=self.shutdown.signal)
        code = status.exit_code if status is not None else ExitCode.PROCESS_FAILED
        if code in self.config.zero_exit_codes:
            # -e CODE (tini's): a JVM that exits 143 on SIGTERM stopped as asked.
            log.info("main process %s %s: exit status 0 (-e %d)", self.main.name, status, code)
            return ExitCode.OK
        log.info("exiting with status %d (main process %s %s)", code, self.main.name, status)
        return code

    def _log_timeline(self, shutdown: Shutdown) -> None:
        deadline = shutdown.deadline
        total = deadline.elapsed()
        header = f"shutdown timeline ({shutdown.reason}; {total:.3f}s of {format_duration(deadline.budget)})"
        if deadline.reasons:
            header += f"; deadline changed: {', '.join(deadline.reasons)}"
        # Where PID 1 would have killed everything (see supervisor/pid1/init.py).
        wall = round(deadline.wall - deadline.started, 4)
        if self.config.log_format == "json":
            log.info(header, extra={"fields": {"timeline": self.timeline.as_json(), "wall": wall}})
            return
        log.info(header)
        for line in self.timeline.render():
            log.info("  %s", line)
        # Not a row: nothing happened there (PID 1 would have killed what
        # was left; the shutdown ended before).
        log.info(
            "  done %.3fs before the wall at +%.3fs, where PID 1 would have killed what was left", wall - total, wall
        )
