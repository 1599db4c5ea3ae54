"""One supervised process: spawn, watch, restart with backoff, stop.

The process is spawned by trio (``trio.lowlevel.open_process``) and waited for
by PID through trio's pidfd machinery; nothing here reaps any other child, so
the exit status is always the process's own (see supervisor/_init.py for why
orphans are somebody else's job).
"""

from __future__ import annotations

import errno
import functools
import logging
import os
import signal
import subprocess
import time
from typing import Protocol

import trio

from .._deadline import Deadline
from .._status import ExitStatus
from .._units import format_duration, signal_name
from ..config import ProcessSpec
from .backoff import RestartTracker
from .capture import pump_through
from .output import notify_line, pump_lines, stderr_writer, stdout_writer
from .readiness import ReadyProbe, describe
from .spawn import spawn_options
from .state import ProcessState, check_transition

__all__ = ["ProcessEvents", "SupervisedProcess"]

log = logging.getLogger("supervisor.process")

# After a process exits, its output pipes may still be held by a grandchild;
# drain what is buffered, but do not wait for strangers.
_OUTPUT_DRAIN_SECONDS = 0.05
# A SIGKILLed process is gone within milliseconds unless it is stuck in the
# kernel (uninterruptible I/O); never wait for ever on it.
_AFTER_KILL_SECONDS = 5.0


class ProcessEvents(Protocol):
    """What the orchestrator hears from a process."""

    def process_started(self, process: SupervisedProcess) -> None: ...

    def process_exited(self, process: SupervisedProcess, status: ExitStatus, will_restart: bool) -> None: ...

    def process_restarted(self, process: SupervisedProcess, attempt: int) -> None: ...

    def process_failed(self, process: SupervisedProcess, reason: str) -> None: ...


class _Child(Protocol):
    """What a run needs of its child: trio's Process, or an adopted one."""

    @property
    def pid(self) -> int: ...

    @property
    def stdout(self) -> trio.abc.ReceiveStream | None: ...

    @property
    def stderr(self) -> trio.abc.ReceiveStream | None: ...

    async def wait(self) -> int: ...


class _Adopted:
    """A child started before trio was running, waited for the way trio waits
    for its own: the pidfd turns readable when the child exits, then
    ``Popen.wait`` reaps exactly that PID."""

    def __init__(self, popen: subprocess.Popen[bytes]) -> None:
        self._popen = popen
        self.pid = popen.pid
        self._pidfd = os.pidfd_open(popen.pid)
        # Its output pipes, made before trio existed, read from now on.
        self.stdout = _adopt_pipe(popen, "stdout")
        self.stderr = _adopt_pipe(popen, "stderr")

    async def wait(self) -> int:
        try:
            await trio.lowlevel.wait_readable(self._pidfd)
            return self._popen.wait()
        finally:
            os.close(self._pidfd)


def _adopt_pipe(popen: subprocess.Popen[bytes], name: str) -> trio.lowlevel.FdStream | None:
    pipe = getattr(popen, name)
    if pipe is None:
        return None
    fd = os.dup(pipe.fileno())
    pipe.close()
    return trio.lowlevel.FdStream(fd)


class SupervisedProcess:
    """Implements the public ``supervisor.ProcessInfo`` view."""

    def __init__(
        self,
        spec: ProcessSpec,
        events: ProcessEvents,
        *,
        inherited_fds: tuple[int, ...] = (),
        already_started: subprocess.Popen[bytes] | None = None,
    ) -> None:
        self.spec = spec
        self._events = events
        self._inherited_fds = inherited_fds
        # The main process may have been started before trio was imported
        # (supervisor.cli.prespawn_main); its first run adopts it.
        self._already_started = already_started
        self.started_early = already_started is not None
        self.supervised = False
        self._process: _Child | None = None
        self._exited = trio.Event()
        self._stop_requested = trio.Event()
        # Set once per run when its readiness is settled: None means ready,
        # a string why it never became ready.
        self._readiness = trio.Event()
        self._not_ready: str | None = None
        self.status: ExitStatus | None = None
        self.restarts = 0
        self.ever_started = False
        self.started_at: float | None = None  # monotonic time of the last spawn
        self.tracker: RestartTracker | None = None
        self._restart_requested = False
        self._state = ProcessState.PENDING
        self.state_since = time.monotonic()

    # -- state ----------------------------------------------------------------

    @property
    def state(self) -> ProcessState:
        return self._state

    def _enter(self, new: ProcessState) -> None:
        check_transition(self.name, self._state, new)
        self._state = new
        self.state_since = time.monotonic()

    def _mark_stopped(self) -> None:
        # Both stop() and the supervising task notice a stop during a
        # backoff; whichever comes first moves the state.
        if self._state is not ProcessState.STOPPED:
            self._enter(ProcessState.STOPPED)

    @property
    def failed_for_good(self) -> bool:
        return self._state is ProcessState.FAILED

    # -- ProcessInfo --------------------------------------------------------

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def pid(self) -> int | None:
        return self._process.pid if self.running and self._process else None

    @property
    def running(self) -> bool:
        return self._process is not None and not self._exited.is_set()

    @property
    def stopping(self) -> bool:
        return self._stop_requested.is_set()

    def __repr__(self) -> str:
        return f"<process {self.name} {self._state.value} pid={self.pid} status={self.status}>"

    # -- running ------------------------------------------------------------

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
        first = True
        while True:
            tracker.started(trio.current_time())
            status = await self._run_once(task_status if first else None)
            first = False
            if self.stopping:
                self._mark_stopped()
                return
            if not self._should_restart(status):
                failed = not status.success and not self.spec.main
                self._enter(ProcessState.FAILED if failed else ProcessState.EXITED)
                self._events.process_exited(self, status, will_restart=False)
                if failed:
                    self._events.process_failed(self, f"exited: {status}")
                return
            delay = tracker.next_delay(trio.current_time())
            if delay is None:
                self._enter(ProcessState.FAILED)
                self._events.process_exited(self, status, will_restart=False)
                self._events.process_failed(
                    self,
                    f"{status}; restarted {tracker.attempt} times within "
                    f"{format_duration(self.spec.backoff.window)}, giving up",
                )
                return
            self._enter(ProcessState.BACKOFF)
            self._events.process_exited(self, status, will_restart=True)
            log.info("restarting %s in %s (%s)", self.name, format_duration(delay), status)
            # A shutdown during the backoff simply ends it: no restart.
            with trio.move_on_after(delay):
                await self._stop_requested.wait()
            if self._stop_requested.is_set():
                self._mark_stopped()
                return
            self.restarts += 1
            self._events.process_restarted(self, tracker.attempt)

    def _should_restart(self, status: ExitStatus) -> bool:
        if self._restart_requested:
            # Stopped to be restarted (a failing health check): whatever
            # the policy says, through the backoff and its limit.
            self._restart_requested = False
            return True
        if self.spec.restart == "always":
            return True
        return self.spec.restart == "on-failure" and not status.success

    async def _run_once(self, task_status: trio.TaskStatus[None] | None) -> ExitStatus:
        self._exited = trio.Event()
        self._readiness = trio.Event()
        self._not_ready = None
        self._enter(ProcessState.STARTING)
        try:
            process = await self._spawn()
        except (OSError, subprocess.SubprocessError) as exc:
            status = self._spawn_failure(exc)
            self._process = None
            self.status = status
            self._exited.set()
            self._settle_readiness(f"could not be started ({status})")
            if task_status is not None:
                task_status.started()
            return status
        self._process = process
        self.ever_started = True
        self.started_at = time.monotonic()
        log.info("started %s (pid %d): %s", self.name, process.pid, _shell_join(self.spec.command))
        if self.spec.ready is None:
            self._settle_readiness(None)
        self._events.process_started(self)
        if task_status is not None:
            task_status.started()
        async with trio.open_nursery() as nursery:
            if self.spec.ready is not None:
                nursery.start_soon(self._probe_readiness)
            # Prefixed lines (log_prefix), or the bytes as they came; both
            # show every line to the observers (supervisor logs).
            prefix = f"[{self.name}] ".encode()
            for source, writer in ((process.stdout, stdout_writer()), (process.stderr, stderr_writer())):
                if source is None:
                    continue
                pump = (
                    functools.partial(pump_lines, source, writer, prefix)
                    if self.spec.log_prefix
                    else functools.partial(pump_through, source, writer)
                )
                nursery.start_soon(
                    functools.partial(pump, process_name=self.name, stream=writer.name, on_line=notify_line)
                )
            # Shielded: a process is always waited for (reaped) by its owner,
            # even while the surrounding task is being cancelled.
            with trio.CancelScope(shield=True):
                returncode = await process.wait()
            nursery.cancel_scope.deadline = trio.current_time() + _OUTPUT_DRAIN_SECONDS
        status = ExitStatus.from_returncode(returncode)
        self.status = status
        self._exited.set()
        self._settle_readiness(f"exited before it was ready: {status}")
        level = logging.INFO if status.success or self.stopping else logging.WARNING
        log.log(level, "%s (pid %d) %s", self.name, process.pid, status)
        return status

    async def _spawn(self) -> _Child:
        if self._already_started is not None:
            popen, self._already_started = self._already_started, None
            return _Adopted(popen)
        o = spawn_options(self.spec, self._inherited_fds)
        return await trio.lowlevel.open_process(o.argv, **o.popen_kwargs())

    def _spawn_failure(self, exc: BaseException) -> ExitStatus:
        program = self.spec.command[0]
        if isinstance(exc, FileNotFoundError) and exc.filename == self.spec.cwd and self.spec.cwd:
            log.error("cannot start %s: working directory %s does not exist", self.name, self.spec.cwd)
            return ExitStatus(code=127)
        if isinstance(exc, FileNotFoundError):
            log.error("cannot start %s: %s: command not found", self.name, program)
            return ExitStatus(code=127)
        if isinstance(exc, OSError) and exc.errno in (errno.EACCES, errno.ENOEXEC, errno.EISDIR, errno.EPERM):
            log.error("cannot start %s: %s: %s (not executable)", self.name, program, exc.strerror)
            return ExitStatus(code=126)
        log.error("cannot start %s: %s", self.name, exc)
        return ExitStatus(code=126)

    # -- readiness ----------------------------------------------------------

    async def wait_ready(self) -> str | None:
        """Wait until this run's readiness is settled: None when the process
        is ready, else why it never became ready (it exited first, or its
        check did not pass within its timeout)."""
        await self._readiness.wait()
        return self._not_ready

    def _settle_readiness(self, not_ready: str | None) -> None:
        """Record the first verdict of this run; later ones do not count."""
        if self._readiness.is_set():
            return
        self._not_ready = not_ready
        self._readiness.set()
        if not_ready is None and self._state is ProcessState.STARTING:
            self._enter(ProcessState.RUNNING)

    async def _probe_readiness(self) -> None:
        """Runs beside every run (the first and each restart) of a process
        with a readiness check, so RUNNING always means "ready"."""
        check = self.spec.ready
        assert check is not None
        probe = ReadyProbe(check, env={**os.environ, **self.spec.env}, cwd=self.spec.cwd)
        with trio.move_on_after(check.timeout):
            await probe.wait()
            if self.running:
                log.info("%s is ready (%s)", self.name, describe(check))
                self._settle_readiness(None)
            return
        why = f"; last probe: {probe.last_failure}" if probe.last_failure else ""
        self._settle_readiness(f"not ready within {format_duration(check.timeout)} ({describe(check)}{why})")

    # -- signals and stopping -------------------------------------------------

    def send_signal(self, signo: int, *, group: bool | None = None) -> bool:
        """Signal the process (its group if it has its own).  False if it is
        not running.  Safe against PID reuse: an exited process is not
        signalled, and a child's PID is not reused before we reap it."""
        if not self.running or self._process is None:
            return False
        use_group = self.spec.process_group if group is None else group and self.spec.process_group
        try:
            if use_group:
                os.killpg(self._process.pid, signo)
            else:
                os.kill(self._process.pid, signo)
        except ProcessLookupError:
            return False
        return True

    async def stop(self, deadline: Deadline, stop_signal: int | None = None) -> ExitStatus | None:
        """Stop signal, wait up to stop_timeout within the deadline, then
        SIGKILL (the group).  Returns the final status (None if it never ran)."""
        self._stop_requested.set()
        if not self.running:
            if self._state in (ProcessState.PENDING, ProcessState.BACKOFF):
                # Never started, or between two runs: it is stopped now.
                self._mark_stopped()
            return self.status
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
        if self._state is not ProcessState.STOPPING:
            self._enter(ProcessState.STOPPING)
        signo = stop_signal or self.spec.stop_signal
        timeout = self.spec.stop_timeout if self.spec.stop_timeout is not None else float("inf")
        log.info(
            "stopping %s (pid %s) with %s, up to %s",
            self.name,
            self.pid,
            signal_name(signo),
            format_duration(min(timeout, deadline.remaining())),
        )
        self.send_signal(signo)
        if self._is_stopped():
            # A stopped process (SIGSTOP, a debugger) cannot act on its stop
            # signal until it is continued; runit and s6 do the same.
            self.send_signal(signal.SIGCONT)
        with deadline.scope(keep_reserve=False, timeout=timeout):
            await self._exited.wait()
        if self.running:
            why = "the shutdown deadline" if deadline.remaining() <= 0 else f"stop_timeout {format_duration(timeout)}"
            log.warning("escalating: SIGKILL to %s (pid %s) after %s", self.name, self.pid, why)
            self.send_signal(signal.SIGKILL)
            with trio.CancelScope(shield=True), trio.move_on_after(_AFTER_KILL_SECONDS):
                await self._exited.wait()
        return self.status

    def _is_stopped(self) -> bool:
        try:
            with open(f"/proc/{self.pid}/stat", "rb") as stat:
                return stat.read().rsplit(b")", 1)[1].split()[0] in (b"T", b"t")
        except (OSError, IndexError):
            return False

    async def wait_exited(self) -> ExitStatus | None:
        await self._exited.wait()
        return self.status


def _shell_join(argv: tuple[str, ...], limit: int = 120) -> str:
    """The command for a log line: one line, and not a whole inline script."""
    import shlex

    text = " ".join(shlex.join(argv).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
