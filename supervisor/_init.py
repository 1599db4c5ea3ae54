"""The init layer: PID 1's duties in small, synchronous, stdlib-only Python.

Why two processes.  A PID 1 must reap every orphan with ``waitpid(-1)``, but
trio (and any plugin that runs a subprocess) waits for its own children by PID;
a global reaper in the same process steals their exit statuses, which CPython
then reports as 0 (``Popen.wait`` finds the child already reaped, gets
ECHILD, and returns 0).  So this layer is PID 1 and the only process that calls
``waitpid(-1)``; it forks the trio orchestrator, which is not a subreaper and
waits only for the processes it spawned.  Orphans re-parent here.

Why this layer owns the deadline.  The orchestrator runs plugins' hooks, and
a hook can stall its event loop (a CPU loop in an ``async def``, say); the
grace period must end on time anyway.  This process runs nothing but this
file, so it cannot hang: it knows the absolute kill time (the wall) from the
moment a shutdown begins — the first SIGTERM/SIGINT it sees itself, or the
orchestrator's report on the status pipe (see supervisor/_initpipe.py) — and
waits with ``sigtimedwait`` against it.  At the wall it SIGKILLs the
orchestrator and everything it sweeps, logs one line saying what was still
running and which step the shutdown had reached, and exits with 137.

Why signals are blocked first.  Until a handler exists, PID 1 of a namespace
drops SIGTERM (the kernel ignores default-action signals for a namespace's
init), so a SIGTERM during start-up would be lost.  Blocked signals are queued
instead, for PID 1 too, and ``sigwaitinfo`` takes them in order; nothing here
runs in a signal handler, so there is no re-entrancy to reason about.

Sequence: block signals → fork the orchestrator (it installs recording
handlers and unblocks, so queued signals reach it) → loop until it exits or
the wall: forward signals to it, reap orphans, read its reports → sweep
survivors (TERM, re-scanning for processes that re-parent meanwhile, KILL at
the wall) → exit with its code.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import sys
import time
from typing import NoReturn

from ._initpipe import SECOND_SIGNAL_SLICE, STATUS_SIGNAL, WALL_EXIT_CODE, StopSignalTime
from ._log import DEBUG, ERROR, INFO, WARNING, LogSettings, write
from ._procstat import ProcStat, read_stat
from ._status import ExitStatus
from ._units import (
    FORWARDABLE_SIGNALS,
    PIPE_RELAY,
    SHUTDOWN_SIGNALS,
    format_duration,
    parse_grace_period,
    parse_signal,
    signal_name,
)

__all__ = ["main"]

# Everything that can be blocked.  TSTP/TTIN/TTOU are blocked too (and then
# neither forwarded nor acted on) so that the init layer never stops itself.
# STATUS_SIGNAL is how the status pipe wakes us.
_BLOCKED = (frozenset(range(1, 32)) - {signal.SIGKILL, signal.SIGSTOP}) | {STATUS_SIGNAL}

# The grace period until the orchestrator reports the configured one, when
# the command line has no --grace-period (the configuration's default).
_DEFAULT_GRACE = 30.0
# When no shutdown deadline is known at all (the orchestrator crashed, say),
# survivors get this long between TERM and KILL.
_DEFAULT_SWEEP_SECONDS = 5.0
# At the wall, how long to keep killing and reaping (processes re-parenting
# from a killed orchestrator, or stuck in uninterruptible sleep) before exiting.
_KILL_SECONDS = 2.0
_SI_USER = 0  # si_code of a kill(2); the kernel's SIGIO has POLL_* codes.

# Subcommands that do no supervising run in this process directly.
_RUN_COMMAND = "run"


def main() -> NoReturn:
    """Console-script entry point."""
    _isolate()
    caller_mask = signal.pthread_sigmask(signal.SIG_BLOCK, _BLOCKED)
    _reset_ignored_signals()
    args = sys.argv[1:]
    if args and not args[0].startswith("-") and args[0] != _RUN_COMMAND:
        # check, plugins, help, plugin subcommands: an ordinary program.
        signal.pthread_sigmask(signal.SIG_SETMASK, caller_mask)
        from .control.protocol import COMMANDS

        if args[0] in COMMANDS:
            # supervisor status, health...: the control socket's client,
            # without even the CLI module's imports (exec probes run it
            # every few seconds).
            from .control.client import main as control_main

            sys.exit(control_main(args))
        from .cli import main as cli_main

        sys.exit(cli_main(args))
    code = InitLayer(args, inherited_fds=_inherited_fds()).run()
    # Everything is done; interpreter shutdown would only delay the exit
    # (about 7 ms), and with it the container's end.
    with contextlib.suppress(OSError, ValueError):
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(code)


# The image's explicit choice to let PYTHONPATH and the user's site
# directory reach the supervisor itself (plugins installed with pip --target).
ALLOW_PYTHONPATH_ENV = "SUPERVISOR_ALLOW_PYTHONPATH"


def _isolate() -> None:
    """Run as ``python -I``: start again with that flag when PYTHONPATH or a
    user site directory could decide what this process imports.

    The supervisor runs as root while the directories on PYTHONPATH may be
    the application's, writable by its dropped user: a ``json.py`` there
    would run as root in every ``supervisor health`` exec probe, and a
    ``.dist-info`` would replace a plugin.  The environment is not changed:
    the processes started get PYTHONPATH as configured.  Nothing of the
    package has run yet but its first imports; ``python -I -m supervisor``
    (or ``-I`` in the script's first line, as the image has) isolates from
    the first byte.
    """
    if sys.flags.isolated or os.environ.get(ALLOW_PYTHONPATH_ENV) == "1":
        return
    import site  # frozen and already imported at start-up: costs nothing

    user_site = site.ENABLE_USER_SITE and site.USER_SITE in sys.path
    if not (os.environ.get("PYTHONPATH") or user_site):
        return
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None and spec.name.endswith("__main__"):  # python -m supervisor
        again = [sys.executable, "-I", "-m", spec.name.removesuffix(".__main__"), *sys.argv[1:]]
    else:  # the console script
        again = [sys.executable, "-I", sys.argv[0], *sys.argv[1:]]
    os.execv(sys.executable, again)


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


class _Options:
    """What this layer needs of the command line before the orchestrator
    has parsed it properly: mistakes are left for the orchestrator to report."""

    def __init__(self, args: list[str], log: LogSettings) -> None:
        self.grace: float = _DEFAULT_GRACE
        # Stop signals that --rewrite drops: they start no shutdown here either.
        self.dropped: set[int] = set()
        self.parent_death_signal: int | None = None
        for name, value in _option_values(args):
            with contextlib.suppress(ValueError):
                self._apply(name, value, log)

    def _apply(self, name: str, value: str, log: LogSettings) -> None:
        if name == "--log-format":
            log.format = value
        elif name == "--log-level":
            log.level = LogSettings("text", value).level
        elif name in ("-v", "--verbose"):
            log.level = DEBUG
        elif name == "--grace-period":
            # Out of bounds: the orchestrator says so and exits 2.
            self.grace = parse_grace_period(value)
        elif name == "--rewrite":
            source, _, target = value.partition(":")
            if parse_signal(target, allow_zero=True) == 0:
                self.dropped.add(parse_signal(source))
        elif name in ("-p", "--parent-death-signal"):
            self.parent_death_signal = parse_signal(value)


_TAKES_VALUE = frozenset({"--log-format", "--log-level", "--grace-period", "--rewrite", "-p", "--parent-death-signal"})


def _option_values(args: list[str]) -> list[tuple[str, str]]:
    """(option, value) pairs of the options above, in order, up to ``--``."""
    found = []
    for i, arg in enumerate(args):
        if arg == "--":
            break
        name, sep, value = arg.partition("=")
        if sep and name in _TAKES_VALUE:
            found.append((name, value))
        elif arg in _TAKES_VALUE and i + 1 < len(args):
            found.append((arg, args[i + 1]))
        elif arg.startswith("-p") and len(arg) > 2 and not arg.startswith("--"):
            found.append(("-p", arg[2:]))
        elif arg in ("-v", "--verbose") or (arg.startswith("-v") and set(arg[1:]) == {"v"}):
            found.append(("-v", ""))
    return found


def _processes() -> dict[int, ProcStat]:
    """Every live (not zombie) process in our PID namespace."""
    found = {}
    for entry in os.listdir("/proc"):
        stat = read_stat(int(entry)) if entry.isdigit() else None
        if stat is not None and not stat.zombie:
            found[stat.pid] = stat
    return found


class InitLayer:
    def __init__(self, args: list[str], inherited_fds: tuple[int, ...] = ()) -> None:
        self.args = args
        self.inherited_fds = inherited_fds
        self.log = LogSettings.from_environment()
        self.options = _Options(args, self.log)
        self.is_pid1 = os.getpid() == 1
        self.parent = os.getppid()
        self.orchestrator = 0
        self.orchestrator_status: int | None = None
        self._pipe_buffer = b""
        # The wall: the earliest of what we know (all time.monotonic()).
        self.grace = self.options.grace
        self.stop_signal_at: float | None = None  # our own first SIGTERM/SIGINT
        self.stop_signal_time = StopSignalTime.share()  # ...and the orchestrator's view of it
        self.reported_wall: float | None = None  # the orchestrator's deadline
        self.second_signal_wall: float | None = None
        self.phase = ""
        self.wall_hit = False
        # -p's signal, when the parent was gone before we could ask for it.
        self._orphaned: int | None = None

    def _say(self, level: int, message: str, **fields: object) -> None:
        write(self.log, level, "supervisor.init", message, fields)

    @property
    def wall(self) -> float | None:
        candidates = [w for w in (self.reported_wall, self.second_signal_wall) if w is not None]
        if self.stop_signal_at is not None:
            candidates.append(self.stop_signal_at + self.grace)
        return min(candidates) if candidates else None

    def run(self) -> int:
        if not self.is_pid1:
            self._become_subreaper()
        read_end, write_end = os.pipe()  # orchestrator → init; close-on-exec
        self.orchestrator = os.fork()
        if self.orchestrator == 0:
            os.close(read_end)
            os._exit(_orchestrator_child(self.args, write_end, self.inherited_fds))
        os.close(write_end)
        _wake_on_data(read_end)
        if self._orphaned is not None:
            self._act_on(self._orphaned, sender=0)
        self._supervise_orchestrator(read_end)
        if self.wall_hit:
            return WALL_EXIT_CODE
        self._read_status_pipe(read_end)
        os.close(read_end)
        self._sweep()
        return WALL_EXIT_CODE if self.wall_hit else self._exit_code()

    def _become_subreaper(self) -> None:
        # Not PID 1 (run by hand, under `docker run --init`, or with
        # shareProcessNamespace): orphans of our children would go to the
        # real init and never be swept.  A child subreaper gets them instead.
        try:
            import prctl

            prctl.set_child_subreaper(True)
            signo = self.options.parent_death_signal
            if signo is not None:
                # -p (tini's): our parent's death arrives as this signal and
                # is handled like one sent by hand (SIGTERM: a shutdown).
                prctl.set_pdeathsig(signo)
                if os.getppid() != self.parent:  # it died before we asked
                    self._orphaned = signo
        except (ImportError, OSError) as exc:
            self._say(
                WARNING,
                f"not PID 1 and cannot become a subreaper ({exc}): orphans will not be reaped by the supervisor",
            )
        else:
            self._say(DEBUG, "not PID 1: registered as child subreaper")

    # -- while the orchestrator runs ---------------------------------------------

    def _supervise_orchestrator(self, status_pipe: int) -> None:
        while self.orchestrator_status is None:
            info = self._wait(self.wall)
            # sigwaitinfo hands out the lowest pending signal first, so a
            # stream of them must never starve SIGCHLD: reap on every wake-up.
            self._reap()
            self._read_status_pipe(status_pipe)
            if info is not None:
                self._on_signal(info)
            if self.orchestrator_status is None and self._at_wall():
                self._hit_wall()
                return

    def _wait(self, until: float | None) -> signal.struct_siginfo | None:
        if until is None:
            return signal.sigwaitinfo(_BLOCKED)
        return signal.sigtimedwait(_BLOCKED, max(0.0, until - time.monotonic()))

    def _at_wall(self) -> bool:
        wall = self.wall
        return wall is not None and time.monotonic() >= wall

    def _on_signal(self, info: signal.struct_siginfo) -> None:
        signo = info.si_signo
        if signo in (signal.SIGCHLD, STATUS_SIGNAL) or info.si_pid == os.getpid():
            # Our own SIGPIPE (a log line to a closed stderr) is ours alone;
            # passing it on would feed a loop of log lines and signals.
            return
        if signo == signal.SIGIO and info.si_code != _SI_USER:
            return  # the status pipe's wake-up when the real-time queue was full
        if signo in FORWARDABLE_SIGNALS:
            self._act_on(signo, info.si_pid)

    def _act_on(self, signo: int, sender: int) -> None:
        if signo in SHUTDOWN_SIGNALS and signo not in self.options.dropped:
            self._on_stop_signal(signo)
        self._say(DEBUG, f"received {signal_name(signo)}, passing it to the orchestrator", sender=sender)
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.orchestrator, PIPE_RELAY if signo == signal.SIGPIPE else signo)

    def _on_stop_signal(self, signo: int) -> None:
        now = time.monotonic()
        wall = self.wall
        if wall is None:
            # The grace period runs from now, whatever the orchestrator does;
            # it reads this moment too when the signal reaches it.
            self.stop_signal_at = now
            self.stop_signal_time.record(now)
            return
        # A second stop signal: the orchestrator gets a short slice to
        # escalate itself (it is told the same signal), then we do.
        self.second_signal_wall = min(wall, now + SECOND_SIGNAL_SLICE)
        self._say(
            WARNING,
            f"received {signal_name(signo)} again: everything is killed within "
            f"{format_duration(round(self.second_signal_wall - now, 3))}",
        )

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
                self._say(DEBUG, f"reaped orphan pid {pid} ({ExitStatus.from_wait_status(status)})")

    def _read_status_pipe(self, fd: int) -> None:
        """The orchestrator's reports, one per line (see supervisor/_initpipe.py)."""
        while True:
            try:
                data = os.read(fd, 65536)
            except (BlockingIOError, OSError):
                break
            if not data:
                break
            self._pipe_buffer += data
        *lines, self._pipe_buffer = self._pipe_buffer.split(b"\n")
        for raw in lines:
            self._on_report(raw.decode(errors="replace"))

    def _on_report(self, line: str) -> None:
        """One report; a garbled one is ignored (the wall never depends on
        the orchestrator alone)."""
        with contextlib.suppress(ValueError):
            self._apply_report(line)

    def _apply_report(self, line: str) -> None:
        kind, _, value = line.partition(" ")
        if kind == "grace":
            self.grace = float(value)
        elif kind == "wall":
            wall = float(value)
            self.reported_wall = wall if self.reported_wall is None else min(self.reported_wall, wall)
        elif kind == "phase":
            self.phase = value
        elif kind == "log":
            fmt, _, level = value.partition(" ")
            self.log = LogSettings(fmt, level)

    # -- the wall -------------------------------------------------------------------

    def _hit_wall(self) -> None:
        """The grace period is over and the orchestrator is still running:
        say what was left and where the shutdown was, then kill it all."""
        self.wall_hit = True
        left = self._survivors()
        running = ", ".join("orchestrator" if p.pid == self.orchestrator else f"{p.comm}[{p.pid}]" for p in left)
        reached = self.phase or ("start-up" if self.reported_wall is None else "the shutdown's first step")
        self._say(
            ERROR,
            f"grace period ({format_duration(self.grace)}) over: SIGKILL to {len(left)} process(es) "
            f"still running ({running}); the shutdown had reached: {reached}; exit status {WALL_EXIT_CODE}",
            phase=reached,
        )
        self._kill_all(left)

    def _kill_all(self, left: list[ProcStat]) -> None:
        """SIGKILL until nothing is left, re-scanning for processes that
        re-parent to us as their parents die; bounded, because a process in
        uninterruptible sleep outlives any signal."""
        end = time.monotonic() + _KILL_SECONDS
        while left and time.monotonic() < end:
            self._signal(signal.SIGKILL, left)
            self._wait_for_no_children(min(end, time.monotonic() + 0.1))
            left = self._survivors()

    # -- after the orchestrator --------------------------------------------------

    def _sweep(self) -> None:
        """TERM every process left, wait for them until the wall, KILL the rest.

        The kernel would SIGKILL them anyway when PID 1 exits; sweeping first
        gives a daemonized grandchild its chance to clean up.  Processes that
        show up meanwhile (re-parented from a dying parent, when we are a
        subreaper) get their TERM as soon as they are seen.
        """
        survivors = self._survivors()
        if not survivors:
            return
        deadline = self.wall or time.monotonic() + _DEFAULT_SWEEP_SECONDS
        self._say(
            INFO,
            f"sweeping {len(survivors)} leftover process(es): SIGTERM",
            pids=",".join(str(p.pid) for p in survivors),
        )
        started = time.monotonic()
        signalled: set[int] = set()
        if self.is_pid1:
            # kill(-1) reaches every process in the namespace but us,
            # including ones forked since the scan.
            self._signal(signal.SIGTERM, survivors)
            self._signal(signal.SIGCONT, survivors)
            signalled.update(p.pid for p in survivors)
        while survivors:
            fresh = [p for p in survivors if p.pid not in signalled]
            for signo in (signal.SIGTERM, signal.SIGCONT):
                self._signal_each(signo, fresh)
            signalled.update(p.pid for p in fresh)
            if self._wait_for_no_children(deadline, wake_on_exit=True):
                survivors = self._survivors()
                continue
            survivors = self._survivors()
            if not survivors or time.monotonic() >= deadline or self.second_signal_wall is not None:
                break
        if not survivors:
            self._say(INFO, f"leftover processes exited after {time.monotonic() - started:.3f}s")
            return
        self._say(
            WARNING,
            f"escalating: SIGKILL to {len(survivors)} leftover process(es) at the deadline",
            pids=",".join(str(p.pid) for p in survivors),
        )
        self._kill_all(survivors)

    def _survivors(self) -> list[ProcStat]:
        """Processes that would outlive us: as PID 1, everything in the
        namespace; as a subreaper, all our descendants (orphans among them
        re-parent to us when their parents die)."""
        self._reap()
        mine = os.getpid()
        table = _processes()
        table.pop(mine, None)
        if self.is_pid1:
            return sorted(table.values(), key=lambda p: p.pid)
        children: dict[int, list[ProcStat]] = {}
        for process in table.values():
            children.setdefault(process.ppid, []).append(process)
        found, todo = [], [mine]
        while todo:
            for child in children.get(todo.pop(), ()):
                found.append(child)
                todo.append(child.pid)
        return sorted(found, key=lambda p: p.pid)

    def _signal(self, signo: int, processes: list[ProcStat]) -> None:
        if self.is_pid1:
            with contextlib.suppress(ProcessLookupError):
                os.kill(-1, signo)
            return
        self._signal_each(signo, processes)

    @staticmethod
    def _signal_each(signo: int, processes: list[ProcStat]) -> None:
        for process in processes:
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signo)

    def _wait_for_no_children(self, deadline: float, *, wake_on_exit: bool = False) -> bool:
        """Reap until no child is left (True) or the deadline passes (False).
        Blocks in sigtimedwait, so it wakes on the exit itself: no polling.
        ``wake_on_exit``: return False after any child's exit, too, so that
        the caller can look for processes that re-parented meanwhile."""
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
            if info is None:
                continue
            if info.si_signo in SHUTDOWN_SIGNALS and info.si_signo not in self.options.dropped:
                self._say(WARNING, f"received {signal_name(info.si_signo)} again: escalating now")
                self.second_signal_wall = time.monotonic()
                return False
            if wake_on_exit and info.si_signo == signal.SIGCHLD:
                self._reap()
                return False

    def _exit_code(self) -> int:
        if self.orchestrator_status is None:
            return 70
        status = ExitStatus.from_wait_status(self.orchestrator_status)
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
