"""``supervisor -- COMMAND`` without a configuration: PID 1 runs the command.

With no plan to run (no configuration: no plugins, no helpers, no health
checks, no control socket unless ``--control`` asks for one), an
orchestrator would only fork, exec and forward, at the price of trio,
pluggy and PyYAML in a second process (about 20 MiB and 40 ms per pod).
Here PID 1 does it itself, as tini does, and keeps what makes it PID 1:
reaping, the stop signals with the grace period's wall, the sweep.

What a stop signal does is what the orchestrator's default plan does for a
lone main process: the main process gets its stop signal (TERM, or what
``--rewrite TERM:...`` says; SIGINT itself for SIGINT, as Ctrl-C), SIGKILL
to its process group a margin before the wall if it is still running (the
plan's escalation, so that PID 1 has exited before the kubelet's own
SIGKILL at the grace period), a second stop signal SIGKILLs it at once, and
at the wall PID 1 kills everything and exits 137.  Other signals are forwarded as they come (``--rewrite``,
``--process-group``).  The exit status is the main process's (``-e`` maps
codes to 0), like tini's.  Nothing is logged unless something goes wrong;
``-v`` tells every step.
"""

from __future__ import annotations

import errno
import os
import signal
import time

from .._log import DEBUG, ERROR, WARNING
from .._status import ExitStatus
from .._units import format_duration, signal_name
from .exits import ExitCode
from .init import InitLayer
from .options import RunOptions
from .state import ShutdownState, wall_margin

__all__ = ["DirectInit"]


class DirectInit(InitLayer):
    def __init__(self, options: RunOptions, inherited_fds: tuple[int, ...] = ()) -> None:
        super().__init__(options, inherited_fds)
        self.child_name = os.path.basename(options.command[0]) or "main"
        # The main process's stop signal: what the orchestrator's plan gives
        # the command (its ProcessSpec.stop_signal).
        self.stop_signal = options.rewrite.get(signal.SIGTERM, signal.SIGTERM) or signal.SIGTERM
        # Whether the main process got its SIGKILL (escalation, a second
        # stop signal): then only the wall is left to wait for.
        self.killed = False

    def _start(self) -> None:
        report_r, report_w = os.pipe()  # close-on-exec: EOF once the exec worked
        me = os.getpid()
        self.child = os.fork()
        if self.child == 0:
            os.close(report_r)
            _exec(self.options.command, report_w, orphan_signal=None if self.is_pid1 else signal.SIGKILL, parent=me)
        os.close(report_w)
        with os.fdopen(report_r, "rb") as report:
            failure = report.read()  # signals are blocked: no EINTR
        if failure:
            self._exec_failed(int(failure))
        else:
            self._say(DEBUG, f"started {self.child_name} (pid {self.child})")

    def _exec_failed(self, number: int) -> None:
        program = self.options.command[0]
        if number == errno.ENOENT:
            self._say(ERROR, f"cannot start {self.child_name}: {program}: command not found")
        else:
            reason = os.strerror(number)
            self._say(ERROR, f"cannot start {self.child_name}: {program}: {reason} (not executable)")

    def _pass_on(self, signo: int, sender: int, *, stop: bool) -> None:
        if self.child_status is not None:
            return  # reaped: its PID may already be another process's
        if stop and self.shutdown.state is ShutdownState.HURRYING:
            return  # _on_second_stop killed it
        target = self.options.rewrite.get(signo, signo)
        if stop and not (signo in self.options.rewrite or signo == signal.SIGINT):
            # Its own stop signal for a stop signal; SIGINT itself for
            # SIGINT (Ctrl-C → 130, as with tini); what --rewrite says, if
            # it says anything.
            target = self.stop_signal
        if stop:
            self._stop(signo, target)
            return
        if target == 0:
            self._say(DEBUG, f"received {signal_name(signo)}: dropped (--rewrite)", sender=sender)
            return
        if self.debugging:
            rewritten = f" as {signal_name(target)}" if target != signo else ""
            self._say(DEBUG, f"forwarded {signal_name(signo)}{rewritten} to {self.child_name}", sender=sender)
        self._send(target, group=self.options.process_group)

    def _stop(self, received: int, target: int) -> None:
        # The orchestrator's name for the step, for the wall's line.
        self.phase = f"stop {self.child_name}"
        self._say(
            DEBUG,
            f"shutting down: received {signal_name(received)} (grace period {format_duration(self.grace)}): "
            f"stopping {self.child_name} with {signal_name(target)}",
        )
        self._send(target, group=self.options.process_group)
        # Stopped (SIGSTOP, a debugger), it would act on nothing but SIGKILL
        # until the wall.  Sent whatever its state, as runit's `sv down` and
        # s6's do: a SIGSTOP sent just before may not have taken effect yet
        # (on a busy machine), so the process would look running here and
        # stop right after.  To a running process SIGCONT does nothing.
        self._send(signal.SIGCONT, group=self.options.process_group)

    def _on_second_stop(self, signo: int) -> None:
        self.hurry_wall = time.monotonic()
        self.shutdown.advance_to(ShutdownState.HURRYING)
        self._say(WARNING, f"received {signal_name(signo)} again: SIGKILL to {self.child_name} now")
        self._kill_child()

    def _escalation(self) -> float | None:
        """When the main process gets SIGKILL if it is still running: the
        wall less the margin the orchestrator's plan keeps (None: not
        stopping, or already killed)."""
        wall = self.wall
        if wall is None or self.killed:
            return None
        return wall - wall_margin(self.grace)

    def _next_wake(self) -> float | None:
        escalation = self._escalation()
        return self.wall if escalation is None else escalation

    def _on_wake(self, info: signal.struct_siginfo | None) -> None:
        escalation = self._escalation()
        if escalation is None or self.child_status is not None or time.monotonic() < escalation:
            return
        assert self.stop_signal_at is not None
        self._say(
            WARNING,
            f"escalating: SIGKILL to {self.child_name}, still running "
            f"{time.monotonic() - self.stop_signal_at:.3f}s after the stop signal "
            f"(the grace period of {format_duration(self.grace)} ends in "
            f"{format_duration(round(wall_margin(self.grace), 3))})",
        )
        self._kill_child()

    def _kill_child(self) -> None:
        self.killed = True
        # Its whole group, as the orchestrator's escalation does.
        self._send(signal.SIGKILL, group=True)

    def _send(self, signo: int, *, group: bool) -> None:
        try:
            if group:
                os.killpg(self.child, signo)  # its own group (setpgid in _exec)
            else:
                os.kill(self.child, signo)
        except ProcessLookupError:
            pass

    def _exit_code(self) -> int:
        assert self.child_status is not None
        status = ExitStatus.from_wait_status(self.child_status)
        code = status.exit_code
        if code in self.options.zero_exit_codes:
            # -e CODE (tini's): a JVM that exits 143 on SIGTERM stopped as asked.
            self._say(DEBUG, f"{self.child_name} {status}: exit status 0 (-e {code})")
            return ExitCode.OK
        self._say(DEBUG, f"exiting with status {code} ({self.child_name} {status})")
        return code


def _exec(command: tuple[str, ...], report_fd: int, *, orphan_signal: int | None, parent: int) -> None:
    """In the forked child: become the command, in a process group of its
    own that owns the terminal (if there is one), with default signal
    dispositions and nothing blocked; on failure write errno to
    ``report_fd`` and exit as a shell would (127 not found, 126 the rest).
    ``orphan_signal``: what the command gets if PID 1 dies first."""
    try:
        os.setpgid(0, 0)
        if orphan_signal is not None:
            # Not PID 1, so SIGKILL can take us away (as PID 1 of a
            # namespace, the kernel kills everything then): the command goes
            # with us instead of running on unsupervised.
            try:
                import prctl

                prctl.set_pdeathsig(orphan_signal)
            except (ImportError, OSError):
                pass
            if os.getppid() != parent:  # it died before we asked
                os._exit(128 + orphan_signal)
        try:
            if os.isatty(0):
                # The foreground group before it can read the terminal (a
                # background read stops it with SIGTTIN), and so that Ctrl-C
                # reaches it; SIGTTOU is still blocked here.
                os.tcsetpgrp(0, os.getpgrp())
        except OSError:
            pass
        # Python ignores SIGPIPE and SIGXFSZ, and ignored stays ignored
        # across exec; SIGINT has Python's handler until the exec.
        for signo in (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGINT):
            signal.signal(signo, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_SETMASK, ())
        os.execvp(command[0], command)
    except OSError as exc:
        number = exc.errno or errno.ENOEXEC
        try:
            os.write(report_fd, str(number).encode())
        except OSError:
            pass
        os._exit(ExitCode.NOT_FOUND if number == errno.ENOENT else ExitCode.NOT_EXECUTABLE)
    finally:
        os._exit(ExitCode.NOT_EXECUTABLE)
