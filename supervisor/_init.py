"""The init layer: PID 1's duties in small, synchronous, stdlib-only Python.

Why two processes.  A PID 1 must reap every orphan with ``waitpid(-1)``, but
trio (and any plugin that runs a subprocess) waits for its own children by PID;
a global reaper in the same process steals their exit statuses, which CPython
then reports as 0 (see ../shared/reference/python-runtime.md, "reaping
hazards").  So this layer is PID 1 and the only process that calls
``waitpid(-1)``; it forks the trio orchestrator, which is not a subreaper and
waits only for the processes it spawned.  Orphans re-parent here.

Why signals are blocked first.  Until a handler exists, PID 1 of a namespace
drops SIGTERM (the kernel ignores default-action signals for a namespace's
init), so a SIGTERM during start-up would be lost.  Blocked signals are queued
instead, for PID 1 too, and ``sigwaitinfo`` takes them in order; nothing here
runs in a signal handler, so there is no re-entrancy to reason about.

Sequence: block signals → fork the orchestrator (it installs recording
handlers and unblocks, so queued signals reach it) → loop: forward signals to
it, reap orphans → when it exits, sweep survivors (TERM, wait until the
shutdown deadline it reported, KILL) → exit with its code.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from typing import NoReturn

from ._log import DEBUG, ERROR, INFO, WARNING, LogSettings, write
from ._units import FORWARDABLE_SIGNALS, PIPE_RELAY, signal_name

__all__ = ["main"]

# Everything that can be blocked.  TSTP/TTIN/TTOU are blocked too (and then
# neither forwarded nor acted on) so that the init layer never stops itself.
_BLOCKED = frozenset(range(1, 32)) - {signal.SIGKILL, signal.SIGSTOP}
_SHUTDOWN_SIGNALS = frozenset({signal.SIGTERM, signal.SIGINT})

# When the orchestrator did not say how long the shutdown may take (it
# crashed, say), survivors get this long between TERM and KILL.
_DEFAULT_SWEEP_SECONDS = 5.0

# Subcommands that do no supervising run in this process directly.
_RUN_COMMAND = "run"


def main() -> NoReturn:
    """Console-script entry point."""
    caller_mask = signal.pthread_sigmask(signal.SIG_BLOCK, _BLOCKED)
    _reset_ignored_signals()
    args = sys.argv[1:]
    if args and not args[0].startswith("-") and args[0] != _RUN_COMMAND:
        # check, plugins, help, plugin subcommands: an ordinary program.
        signal.pthread_sigmask(signal.SIG_SETMASK, caller_mask)
        from .cli import main as cli_main

        sys.exit(cli_main(args))
    code = InitLayer(args, inherited_fds=_inherited_fds()).run()
    # Everything is done; interpreter shutdown would only delay the exit
    # (about 7 ms), and with it the container's end.
    with contextlib.suppress(OSError, ValueError):
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(code)


def _reset_ignored_signals() -> None:
    """Ignored dispositions survive exec: a caller's ``nohup`` or ``trap ''``
    would otherwise reach every process we start.  Children start with
    default dispositions (SIGPIPE and SIGXFSZ, which Python itself ignores,
    are restored by subprocess).  glibc reserves 32 and 33; they cannot be
    changed from Python and are left as inherited."""
    keep = {signal.SIGKILL, signal.SIGSTOP, signal.SIGPIPE, signal.SIGXFSZ}
    for signo in signal.valid_signals():
        if signo not in keep and signal.getsignal(signo) == signal.SIG_IGN:
            signal.signal(signo, signal.SIG_DFL)


def _inherited_fds() -> tuple[int, ...]:
    """Descriptors the caller passed us (socket activation, say).  They go to
    the main process only; everything this program opens is close-on-exec."""
    fds = []
    for entry in os.listdir("/proc/self/fd"):
        fd = int(entry)
        if fd > 2:
            with contextlib.suppress(OSError):
                if os.get_inheritable(fd):
                    fds.append(fd)
    return tuple(sorted(fds))


class InitLayer:
    def __init__(self, args: list[str], inherited_fds: tuple[int, ...] = ()) -> None:
        self.args = args
        self.inherited_fds = inherited_fds
        self.log = LogSettings.from_environment()
        _prescan_log_options(args, self.log)
        self.is_pid1 = os.getpid() == 1
        self.orchestrator = 0
        self.orchestrator_status: int | None = None
        self.sweep_deadline: float | None = None

    def _say(self, level: int, message: str, **fields: object) -> None:
        write(self.log, level, "supervisor.init", message, fields)

    def run(self) -> int:
        if not self.is_pid1:
            self._become_subreaper()
        read_end, write_end = os.pipe()  # orchestrator → init; close-on-exec
        self.orchestrator = os.fork()
        if self.orchestrator == 0:
            os.close(read_end)
            os._exit(_orchestrator_child(self.args, write_end, self.inherited_fds))
        os.close(write_end)
        os.set_blocking(read_end, False)
        self._supervise_orchestrator(read_end)
        self._read_status_pipe(read_end)
        os.close(read_end)
        self._sweep()
        return self._exit_code()

    def _become_subreaper(self) -> None:
        # Not PID 1 (run by hand, under `docker run --init`, or with
        # shareProcessNamespace): orphans of our children would go to the
        # real init and never be swept.  A child subreaper gets them instead.
        try:
            import prctl

            prctl.set_child_subreaper(True)
        except (ImportError, OSError) as exc:
            self._say(
                WARNING,
                f"not PID 1 and cannot become a subreaper ({exc}): orphans will not be reaped by the supervisor",
            )
        else:
            self._say(DEBUG, "not PID 1: registered as child subreaper")

    def _supervise_orchestrator(self, status_pipe: int) -> None:
        me = os.getpid()
        while self.orchestrator_status is None:
            info = signal.sigwaitinfo(_BLOCKED)
            signo = info.si_signo
            # sigwaitinfo hands out the lowest pending signal first, so a
            # stream of them must never starve SIGCHLD: reap on every wake-up.
            self._reap()
            if signo == signal.SIGCHLD or info.si_pid == me:
                # Our own SIGPIPE (a log line to a closed stderr) is ours alone;
                # passing it on would feed a loop of log lines and signals.
                pass
            elif signo in FORWARDABLE_SIGNALS:
                self._say(DEBUG, f"received {signal_name(signo)}, passing it to the orchestrator", sender=info.si_pid)
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self.orchestrator, PIPE_RELAY if signo == signal.SIGPIPE else signo)
            self._read_status_pipe(status_pipe)

    def _reap(self) -> None:
        """Reap every child that has exited: orphans, and the orchestrator."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if pid == self.orchestrator:
                self.orchestrator_status = status
            else:
                self._say(DEBUG, f"reaped orphan pid {pid} ({_describe(status)})")

    def _read_status_pipe(self, fd: int) -> None:
        """Messages from the orchestrator, one per line: ``deadline <seconds
        left>`` and ``log <format> <level>``."""
        try:
            data = os.read(fd, 65536)
        except BlockingIOError:
            return
        for line in data.decode(errors="replace").splitlines():
            words = line.split()
            if len(words) == 2 and words[0] == "deadline":
                self.sweep_deadline = time.monotonic() + max(0.0, float(words[1]))
            elif len(words) == 3 and words[0] == "log":
                self.log = LogSettings(words[1], words[2])

    def _sweep(self) -> None:
        """TERM every process left, wait for them until the deadline, KILL the rest.

        The kernel would SIGKILL them anyway when PID 1 exits; sweeping first
        gives a daemonized grandchild its chance to clean up.
        """
        survivors = self._survivors()
        if not survivors:
            return
        deadline = self.sweep_deadline or time.monotonic() + _DEFAULT_SWEEP_SECONDS
        self._say(INFO, f"sweeping {len(survivors)} leftover process(es): SIGTERM", pids=",".join(map(str, survivors)))
        started = time.monotonic()
        self._signal_survivors(signal.SIGTERM, survivors)
        self._signal_survivors(signal.SIGCONT, survivors)
        if self._wait_for_no_children(deadline):
            self._say(INFO, f"leftover processes exited after {time.monotonic() - started:.3f}s")
            return
        left = self._survivors()
        self._say(
            WARNING,
            f"escalating: SIGKILL to {len(left)} leftover process(es) at the deadline",
            pids=",".join(map(str, left)),
        )
        while left:
            self._signal_survivors(signal.SIGKILL, left)
            self._wait_for_no_children(time.monotonic() + 1.0)
            left = self._survivors()

    def _survivors(self) -> list[int]:
        """Processes that would outlive us: as PID 1, everything in the
        namespace; as a subreaper, our children (orphans re-parent to us)."""
        self._reap()
        mine = os.getpid()
        found = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) == mine:
                continue
            try:
                with open(f"/proc/{entry}/stat", "rb") as stat:
                    fields = stat.read().rsplit(b")", 1)[1].split()
            except OSError:
                continue
            state, ppid = fields[0], int(fields[1])
            if state == b"Z":
                continue
            if self.is_pid1 or ppid == mine:
                found.append(int(entry))
        return found

    def _signal_survivors(self, signo: int, pids: list[int]) -> None:
        if self.is_pid1:
            # kill(-1) reaches every process in the namespace but us, including
            # ones forked since the scan.
            with contextlib.suppress(ProcessLookupError):
                os.kill(-1, signo)
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signo)

    def _wait_for_no_children(self, deadline: float) -> bool:
        """Reap until no child is left (True) or the deadline passes (False).
        Blocks in sigtimedwait, so it wakes on the exit itself: no polling."""
        while True:
            self._reap()
            try:
                os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            info = signal.sigtimedwait(_BLOCKED, left)
            if info is not None and info.si_signo in _SHUTDOWN_SIGNALS:
                self._say(WARNING, f"received {signal_name(info.si_signo)} again: escalating now")
                return False

    def _exit_code(self) -> int:
        status = self.orchestrator_status
        if status is None:
            return 70
        if os.WIFSIGNALED(status):
            signo = os.WTERMSIG(status)
            self._say(ERROR, f"orchestrator killed by {signal_name(signo)}")
            return 128 + signo
        return os.waitstatus_to_exitcode(status)


def _orchestrator_child(args: list[str], status_fd: int, inherited_fds: tuple[int, ...]) -> int:
    """Runs in the forked child; returns its exit code (never raises)."""
    try:
        from ._early import EarlySignals

        early = EarlySignals.install(os.getppid())
        from .cli import run_main  # the heavy imports: trio, pluggy, yaml

        return run_main(args, early=early, status_fd=status_fd, inherited_fds=inherited_fds)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 2
    except BaseException:
        import traceback

        traceback.print_exc()
        return 70
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        output = sys.modules.get("supervisor.runtime.output")
        if output is not None:
            # Queued log lines get a moment; a stuck sink does not hold us.
            output.flush_all()


def _prescan_log_options(args: list[str], settings: LogSettings) -> None:
    """Honour --log-format and -v for the init layer's own lines before the
    orchestrator has parsed the command line properly."""
    for i, arg in enumerate(args):
        if arg == "--":
            break
        if arg == "--log-format" and i + 1 < len(args):
            settings.format = args[i + 1]
        elif arg.startswith("--log-format="):
            settings.format = arg.split("=", 1)[1]
        elif arg in ("-v", "--verbose") or (arg.startswith("-v") and set(arg[1:]) == {"v"}):
            settings.level = DEBUG


def _describe(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"killed by {signal_name(os.WTERMSIG(status))}"
    return f"exit code {os.waitstatus_to_exitcode(status)}"
