"""PID 1 with the trio orchestrator as its child (there is a configuration).

Signals go to the orchestrator, which runs the plan; once it says which PID
the main process has (`MainPid`), PID 1 forwards the main process's other
signals to it itself.  The orchestrator's messages on the status pipe move
the wall and name the step the shutdown is in (supervisor/pid1/protocol.py).
"""

from __future__ import annotations

import fcntl
import os
import signal
import sys
import time

from .._log import DEBUG, ERROR, LogSettings
from .._status import ExitStatus
from .._units import FORWARDABLE_SIGNALS, PIPE_RELAY, signal_name
from .exits import ExitCode
from .init import STATUS_SIGNAL, InitLayer
from .options import RunOptions
from .protocol import (
    SECOND_SIGNAL_SLICE,
    Grace,
    Log,
    MainPid,
    Message,
    Phase,
    Reached,
    ShutdownSignals,
    StatusReader,
    StopSignalTime,
    Wall,
)
from .state import SHUTDOWN_TRANSITIONS, ShutdownState

__all__ = ["OrchestratorInit"]

# The status pipe is read at least this often while signals for the main
# process keep PID 1 awake (as the reaping is: supervisor/pid1/init.py).
_READ_AT_LEAST_EVERY = 0.005


class OrchestratorInit(InitLayer):
    """PID 1 with the trio orchestrator as its child: signals go to it (the
    main process's straight to the main process, once it is told its PID),
    and its reports on the status pipe move the wall."""

    child_name = "orchestrator"
    # The orchestrator hears the same stop signal and escalates itself first.
    hurry_slice = SECOND_SIGNAL_SLICE

    def __init__(self, options: RunOptions, inherited_fds: tuple[int, ...] = ()) -> None:
        super().__init__(options, inherited_fds)
        self.stop_signal_time = StopSignalTime.share()  # the orchestrator's view of stop_signal_at
        self.status: StatusReader | None = None
        self.main_pid = 0
        self._main_pidfd: int | None = None
        self._read_by = 0.0  # when the status pipe is read, whatever woke us

    def _start(self) -> None:
        read_end, write_end = os.pipe()  # orchestrator → PID 1; close-on-exec
        self.child = os.fork()
        if self.child == 0:
            os.close(read_end)
            os._exit(_orchestrator_child(self.options, write_end, self.inherited_fds))
        os.close(write_end)
        _wake_on_data(read_end)
        self.status = StatusReader(read_end)

    def _on_wake(self, info: signal.struct_siginfo | None) -> None:
        # Not only on STATUS_SIGNAL's wake-ups: sigtimedwait hands out the
        # lowest pending signal first, and a stream of forwarded ones must
        # not hold back a moved wall.  But not on every signal this process
        # sends on to the main process itself either: that latency is PID
        # 1's figure to beat, and reading an empty pipe (a system call and
        # an exception) was about a tenth of it.  Such a signal needs
        # nothing from the pipe: the main PID, the grace period and the stop
        # signals arrive before it is known.
        now = time.monotonic()
        if info is not None and now < self._read_by and self._forwards_itself(info.si_signo):
            return
        self._read_status()
        self._read_by = now + _READ_AT_LEAST_EVERY

    def _forwards_itself(self, signo: int) -> bool:
        """Whether ``signo`` goes straight to the main process from here."""
        return self._main_pidfd is not None and signo in FORWARDABLE_SIGNALS and not self._is_stop_signal(signo)

    def _read_status(self) -> None:
        if self.status is not None:
            for message in self.status.read():
                self._on_message(message)

    def _child_gone(self) -> None:
        self._read_status()
        if self.status is not None:
            os.close(self.status.fd)
            self.status = None
        self._forget_main()

    def _on_message(self, message: Message) -> None:
        match message:
            case Grace(seconds):
                self.grace = seconds
            case Wall(monotonic):
                self._on_wall(monotonic)
            case Phase(text):
                self.phase = text
            case Log(fmt, level):
                self.log = LogSettings(fmt, level)
            case ShutdownSignals(signals):
                self.shutdown_signals = signals
            case Reached(state):
                self._follow(state)
            case MainPid(pid):
                self._forget_main()
                self._follow_main(pid)

    def _on_wall(self, monotonic: float) -> None:
        """The orchestrator's deadline: it only ever moves the wall earlier."""
        self.reported_wall = monotonic if self.reported_wall is None else min(self.reported_wall, monotonic)
        if not self.shutdown.state.shutting_down:
            self.shutdown.enter(ShutdownState.STOPPING)

    def _follow(self, state: ShutdownState) -> None:
        """The orchestrator's move, where the table allows it; the child
        exiting and the wall are PID 1's own to see."""
        ours = state in (ShutdownState.STOPPING, ShutdownState.HURRYING)
        if ours and state in SHUTDOWN_TRANSITIONS[self.shutdown.state]:
            self.shutdown.enter(state)

    def _follow_main(self, pid: int) -> None:
        """Forward the main process's signals to ``pid`` from now on,
        through a pidfd: a PID that was reaped and reused meanwhile gets
        nothing."""
        if pid <= 0:
            return
        try:
            self._main_pidfd = os.pidfd_open(pid)
        except OSError:
            return  # already gone, or no pidfd: the orchestrator forwards
        self.main_pid = pid

    def _forget_main(self) -> None:
        if self._main_pidfd is not None:
            os.close(self._main_pidfd)
        self.main_pid, self._main_pidfd = 0, None

    def _on_first_stop(self) -> None:
        assert self.stop_signal_at is not None
        self.stop_signal_time.record(self.stop_signal_at)

    def _pass_on(self, signo: int, sender: int, *, stop: bool) -> None:
        if not stop and self._main_pidfd is not None and self._forward_to_main(signo):
            return
        if self.debugging:
            self._say(DEBUG, f"received {signal_name(signo)}, passing it to the orchestrator", sender=sender)
        try:
            os.kill(self.child, PIPE_RELAY if signo == signal.SIGPIPE else signo)
        except ProcessLookupError:
            pass

    def _forward_to_main(self, signo: int) -> bool:
        """The main process's signal, from here: False when it is gone (the
        orchestrator then says so)."""
        assert self._main_pidfd is not None
        target = self.options.rewrite.get(signo, signo)
        if target == 0:
            self._say(DEBUG, f"received {signal_name(signo)}: dropped (--rewrite)")
            return True
        try:
            if self.options.process_group:
                # Its group cannot have been reused while it is there.
                signal.pidfd_send_signal(self._main_pidfd, 0)
                os.killpg(self.main_pid, target)
            else:
                signal.pidfd_send_signal(self._main_pidfd, target)
        except ProcessLookupError:
            return False
        if self.debugging:
            rewritten = f" as {signal_name(target)}" if target != signo else ""
            self._say(DEBUG, f"forwarded {signal_name(signo)}{rewritten} to the main process (pid {self.main_pid})")
        return True

    def _exit_code(self) -> int:
        if self.child_status is None:
            return ExitCode.PROCESS_FAILED
        status = ExitStatus.from_wait_status(self.child_status)
        if status.signal is not None:
            self._say(ERROR, f"orchestrator {status}")
        return status.exit_code


def _wake_on_data(fd: int) -> None:
    """Non-blocking, and every write to the pipe queues STATUS_SIGNAL to us
    (``F_SETSIG``; SIGIO if the real-time queue is full), so the reports
    wake ``sigtimedwait`` like any signal."""
    os.set_blocking(fd, False)
    fcntl.fcntl(fd, fcntl.F_SETOWN, os.getpid())
    fcntl.fcntl(fd, fcntl.F_SETSIG, STATUS_SIGNAL)
    fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_ASYNC)


def _orchestrator_child(options: RunOptions, status_fd: int, inherited_fds: tuple[int, ...]) -> int:
    """Runs in the forked child; returns its exit code (never raises)."""
    import gc

    # PID 1's objects, inherited, go to the collector's permanent generation:
    # its passes then never write to (and so copy) the pages shared with
    # PID 1.  About 0.35 MiB of the two processes' PSS.  Cyclic garbage PID 1
    # had not collected yet is frozen with them (a few dozen objects of its
    # command-line parse): a collection here would write to every page.
    gc.freeze()
    try:
        from_plan = None
        if options.config_path and not options.command and not signal.sigpending():
            # First of all (~70 ms before trio and PyYAML are imported, 3 ms
            # before the early handlers are): the main process from the
            # file's compiled plan, if `supervisor check` wrote a usable one.
            # Not after a stop signal: that one is still blocked, pending.
            from .._compiled import start_from_plan

            from_plan = start_from_plan(options.config_path, inherited_fds)
        from .early import EarlySignals

        early = EarlySignals.install(os.getppid())
        from .._run import run_main  # the heavy imports: trio, the configuration

        return run_main(options, early=early, status_fd=status_fd, inherited_fds=inherited_fds, from_plan=from_plan)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else ExitCode.USAGE
    except BaseException:
        import traceback

        traceback.print_exc()
        return ExitCode.PROCESS_FAILED
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except Exception:
            pass
        output = sys.modules.get("supervisor.runtime.output")
        if output is not None:
            # Queued log lines get a moment; a stuck sink does not hold us.
            output.flush_all()
