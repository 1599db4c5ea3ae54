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
package, so it cannot hang: it knows the absolute kill time (the wall) from
the moment a shutdown begins — the first stop signal it sees itself, or the
orchestrator's report on the status pipe (supervisor/pid1/orchestrated.py,
supervisor/pid1/protocol.py) — and
waits with ``sigtimedwait`` against it.  At the wall it SIGKILLs the
orchestrator and everything it sweeps, logs one line saying what was still
running and which step the shutdown had reached, and exits with 137.

Why signals are blocked first.  Until a handler exists, PID 1 of a namespace
drops SIGTERM (the kernel ignores default-action signals for a namespace's
init), so a SIGTERM during start-up would be lost.  Blocked signals are queued
instead, for PID 1 too, and ``sigwaitinfo`` takes them in order; nothing here
runs in a signal handler, so there is no re-entrancy to reason about.

Without a configuration (``supervisor -- COMMAND``) there is nothing for an
orchestrator to do: PID 1 runs the command itself (supervisor/pid1/direct.py)
with the same wall and sweep, and never imports trio.

Sequence: block signals (supervisor/_main.py) → fork the orchestrator (it installs recording
handlers and unblocks, so queued signals reach it) → loop until it exits or
the wall: forward signals to it, reap orphans, read its reports → sweep
survivors (TERM, re-scanning for processes that re-parent meanwhile, KILL at
the wall) → exit with its code.
"""

from __future__ import annotations

import os
import signal
import time

from .._log import DEBUG, ERROR, INFO, WARNING, LogSettings, write
from .._procstat import ProcStat, read_stat
from .._status import ExitStatus
from .._units import FORWARDABLE_SIGNALS, SHUTDOWN_SIGNALS, format_duration, signal_name
from .exits import ExitCode
from .options import RunOptions
from .state import ShutdownLifecycle, ShutdownState

__all__ = ["BLOCKED", "STATUS_SIGNAL", "InitLayer", "inherited_fds", "log_settings", "reset_ignored_signals"]

# A write to the status pipe wakes PID 1 with this real-time signal
# (PIPE_RELAY is SIGRTMIN+1); see supervisor/pid1/protocol.py.
STATUS_SIGNAL = int(signal.SIGRTMIN) + 2

# Everything that can be blocked.  TSTP/TTIN/TTOU are blocked too (and then
# neither forwarded nor acted on) so that the init layer never stops itself.
# STATUS_SIGNAL is how the status pipe wakes us.
BLOCKED = (frozenset(range(1, 32)) - {signal.SIGKILL, signal.SIGSTOP}) | {STATUS_SIGNAL}

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
# sigwaitinfo hands out the lowest-numbered pending signal first, so a steady
# stream of lower ones (SIGUSR1 is 10, SIGCHLD 17) could hold SIGCHLD back
# as long as the stream lasts.  The loop reaps when SIGCHLD wakes it, and at
# least this often whatever woke it: a forwarded signal's path has no waitpid
# call of its own (its latency is PID 1's figure to beat).
_REAP_AT_LEAST_EVERY = 0.005


def reset_ignored_signals() -> None:
    """Ignored dispositions survive exec: a caller's ``nohup`` or ``trap ''``
    would otherwise reach every process we start.  Children start with
    default dispositions (SIGPIPE and SIGXFSZ, which Python itself ignores,
    are restored by whoever starts a child).  glibc reserves 32 and 33; they
    cannot be changed from Python and are left as inherited."""
    keep = {signal.SIGKILL, signal.SIGSTOP, signal.SIGPIPE, signal.SIGXFSZ}
    for signo in signal.valid_signals():
        if signo not in keep and signal.getsignal(signo) == signal.SIG_IGN:
            signal.signal(signo, signal.SIG_DFL)


def inherited_fds() -> tuple[int, ...]:
    """Descriptors the caller passed us (socket activation, say).  They go to
    the main process only; everything this program opens is close-on-exec."""
    fds = []
    for entry in os.listdir("/proc/self/fd"):
        fd = int(entry)
        if fd > 2:
            try:
                if os.get_inheritable(fd):
                    fds.append(fd)
            except OSError:
                pass
    return tuple(sorted(fds))


def log_settings(options: RunOptions) -> LogSettings:
    """The environment's log settings with the command line's on top (the
    configuration's arrive later, as a `Log` message)."""
    log = LogSettings.from_environment()
    if options.log_format is not None:
        log.format = options.log_format
    if options.log_level is not None:
        log.level = LogSettings("text", options.log_level).level
    if options.verbose:
        log.level = DEBUG
    return log


def _processes() -> dict[int, ProcStat]:
    """Every live (not zombie) process in our PID namespace."""
    found = {}
    for entry in os.listdir("/proc"):
        stat = read_stat(int(entry)) if entry.isdigit() else None
        if stat is not None and not stat.zombie:
            found[stat.pid] = stat
    return found


class InitLayer:
    """PID 1's duties whatever its one child is (the orchestrator, or the main
    process itself): reap, the shutdown's wall, the sweep.  Subclasses say
    how the child starts, what a signal does to it and what its end means."""

    child_name = "child"
    # After a second stop signal, how long the child has to finish on its
    # own before PID 1 kills everything.
    hurry_slice = 0.0

    def __init__(self, options: RunOptions, inherited_fds: tuple[int, ...] = ()) -> None:
        self.options = options
        self.inherited_fds = inherited_fds
        self.log = log_settings(options)
        # Our own PID, asked once: a signal we sent ourselves is ours alone.
        self.pid = os.getpid()
        self.is_pid1 = self.pid == 1
        self.parent = os.getppid()
        self.child = 0
        self.child_status: int | None = None
        self.shutdown = ShutdownLifecycle()
        # The signals that start the shutdown (the configuration's may come
        # later, as a message); a --rewrite to 0 drops one before anything.
        self.shutdown_signals = options.shutdown_signals or SHUTDOWN_SIGNALS
        # The wall: the earliest of what we know (all time.monotonic()).
        self.grace = options.grace_period if options.grace_period is not None else _DEFAULT_GRACE
        self.stop_signal_at: float | None = None  # our own first stop signal
        self.reported_wall: float | None = None  # the orchestrator's deadline
        self.hurry_wall: float | None = None  # a second stop signal's
        self.phase = ""
        # -p's signal, when the parent was gone before we could ask for it.
        self._orphaned: int | None = None

    def _say(self, level: int, message: str, **fields: object) -> None:
        write(self.log, level, "supervisor.init", message, fields)

    @property
    def debugging(self) -> bool:
        """Whether debug lines are shown: the forwarding path builds its
        line only then (a signal's latency is PID 1's alone)."""
        return self.log.level <= DEBUG

    @property
    def wall(self) -> float | None:
        candidates = [w for w in (self.reported_wall, self.hurry_wall) if w is not None]
        if self.stop_signal_at is not None:
            candidates.append(self.stop_signal_at + self.grace)
        return min(candidates) if candidates else None

    def run(self) -> int:
        if not self.is_pid1:
            self._become_subreaper()
        self._start()
        if self._orphaned is not None:
            self._act_on(self._orphaned, sender=0)
        self._supervise()
        if self.shutdown.state is ShutdownState.AT_WALL:
            self.shutdown.enter(ShutdownState.EXITED)
            return ExitCode.WALL
        self._child_gone()
        self.shutdown.enter(ShutdownState.SWEEPING)
        self._sweep()
        self.shutdown.enter(ShutdownState.EXITED)
        return self._exit_code()

    # -- what the subclasses say ---------------------------------------------------

    def _start(self) -> None:
        """Start the child (``self.child``)."""
        raise NotImplementedError

    def _pass_on(self, signo: int, sender: int, *, stop: bool) -> None:
        """Give the child a signal; ``stop``: it starts (or, a second time,
        hurries) the shutdown."""
        raise NotImplementedError

    def _on_wake(self, info: signal.struct_siginfo | None) -> None:
        """Every wake-up of the loop, with what woke it (None: the timeout)."""

    def _next_wake(self) -> float | None:
        """Until when the loop may sleep when nothing happens: the wall."""
        return self.wall

    def _child_gone(self) -> None:
        """The child has been reaped; before the sweep."""

    def _exit_code(self) -> int:
        raise NotImplementedError

    # -- start-up --------------------------------------------------------------------

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

    # -- while the child runs ---------------------------------------------------------

    def _supervise(self) -> None:
        reap_by = 0.0
        while self.child_status is None:
            info = self._wait(self._next_wake())
            if info is None or info.si_signo == signal.SIGCHLD or time.monotonic() >= reap_by:
                self._reap()
                reap_by = time.monotonic() + _REAP_AT_LEAST_EVERY
            self._on_wake(info)
            if info is not None:
                self._on_signal(info)
            if self.child_status is None and self._at_wall():
                self._hit_wall()
                return

    def _wait(self, until: float | None) -> signal.struct_siginfo | None:
        if until is None:
            return signal.sigwaitinfo(BLOCKED)
        return signal.sigtimedwait(BLOCKED, max(0.0, until - time.monotonic()))

    def _at_wall(self) -> bool:
        wall = self.wall
        return wall is not None and time.monotonic() >= wall

    def _on_signal(self, info: signal.struct_siginfo) -> None:
        signo = info.si_signo
        if signo in (signal.SIGCHLD, STATUS_SIGNAL) or info.si_pid == self.pid:
            # Our own SIGPIPE (a log line to a closed stderr) is ours alone;
            # passing it on would feed a loop of log lines and signals.
            return
        if signo == signal.SIGIO and info.si_code != _SI_USER:
            return  # the status pipe's wake-up when the real-time queue was full
        if signo in FORWARDABLE_SIGNALS:
            self._act_on(signo, info.si_pid)

    def _is_stop_signal(self, signo: int) -> bool:
        return signo in self.shutdown_signals and self.options.rewrite.get(signo) != 0

    def _act_on(self, signo: int, sender: int) -> None:
        self._pass_on(signo, sender, stop=self._note_stop(signo))

    def _note_stop(self, signo: int) -> bool:
        """What ``signo`` does to the shutdown; True if it is a stop signal."""
        if not self._is_stop_signal(signo):
            return False
        if not self.shutdown.state.shutting_down:
            # The grace period runs from now, whatever the orchestrator
            # does; it reads this moment too when the signal reaches it.
            self.stop_signal_at = time.monotonic()
            self.shutdown.enter(ShutdownState.STOPPING)
            self._on_first_stop()
        else:
            self._on_second_stop(signo)
        return True

    def _on_first_stop(self) -> None:
        """The first stop signal's moment is known (``stop_signal_at``)."""

    def _on_second_stop(self, signo: int) -> None:
        # The child gets a short slice to escalate itself (it is told the
        # same signal), then we do.
        now = time.monotonic()
        self.hurry_wall = min(self.wall or now + self.hurry_slice, now + self.hurry_slice)
        self.shutdown.advance_to(ShutdownState.HURRYING)
        self._say(
            WARNING,
            f"received {signal_name(signo)} again: everything is killed within "
            f"{format_duration(round(self.hurry_wall - now, 3))}",
        )

    def _reap(self) -> None:
        """Reap every child that has exited: orphans, and our own child."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if pid == self.child:
                self.child_status = status
            else:
                self._say(DEBUG, f"reaped orphan pid {pid} ({ExitStatus.from_wait_status(status)})")

    # -- the wall -------------------------------------------------------------------

    def _hit_wall(self) -> None:
        """The grace period is over and the child is still running: say what
        was left and where the shutdown was, then kill it all."""
        self.shutdown.enter(ShutdownState.AT_WALL)
        left = self._survivors()
        running = ", ".join(self.child_name if p.pid == self.child else f"{p.comm}[{p.pid}]" for p in left)
        reached = self.phase or ("start-up" if self.reported_wall is None else "the shutdown's first step")
        self._say(
            ERROR,
            f"grace period ({format_duration(self.grace)}) over: SIGKILL to {len(left)} process(es) "
            f"still running ({running}); the shutdown had reached: {reached}; exit status {int(ExitCode.WALL)}",
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

    # -- after the child ------------------------------------------------------------

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
            if not survivors or time.monotonic() >= deadline or self.hurry_wall is not None:
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
            try:
                os.kill(-1, signo)
            except ProcessLookupError:
                pass
            return
        self._signal_each(signo, processes)

    @staticmethod
    def _signal_each(signo: int, processes: list[ProcStat]) -> None:
        for process in processes:
            try:
                os.kill(process.pid, signo)
            except ProcessLookupError:
                pass

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
            info = signal.sigtimedwait(BLOCKED, left)
            if info is None:
                continue
            if self._is_stop_signal(info.si_signo):
                self._say(WARNING, f"received {signal_name(info.si_signo)} again: escalating now")
                self.hurry_wall = time.monotonic()
                return False
            if wake_on_exit and info.si_signo == signal.SIGCHLD:
                self._reap()
                return False
