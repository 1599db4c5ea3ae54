"""One run of a supervised process: from its spawn until it is reaped.

A ``Run`` is made for every start (the first and each restart) and never
reused, so nothing of one run (its PID above all) can leak into the next.
It spawns the process, passes its output on, waits for it, and stops it on
request: stop signal, ``stop_timeout`` within the deadline, then SIGKILL.
Whether and when to start another run is not its business (see
``restart``), nor is readiness (see ``gate``).
"""

from __future__ import annotations

import functools
import logging
import os
import signal
import subprocess

import trio

from .._deadline import Deadline
from .._status import ExitStatus
from .._units import format_duration, signal_name
from ..config import ProcessSpec
from .capture import pump_through
from .child import AlreadyStarted, Child, open_child, spawn_failure
from .output import notify_line, pump_lines, stderr_writer, stdout_writer

__all__ = ["Run"]

log = logging.getLogger("supervisor.process")

# After a process exits, its output pipes may still be held by a grandchild;
# drain what is buffered, but do not wait for strangers.
_OUTPUT_DRAIN_SECONDS = 0.05
# A SIGKILLed process is gone within milliseconds unless it is stuck in the
# kernel (uninterruptible I/O); never wait for ever on it.
_AFTER_KILL_SECONDS = 5.0


class Run:
    def __init__(self, spec: ProcessSpec) -> None:
        self.spec = spec
        self.child: Child | None = None
        self.status: ExitStatus | None = None
        # Set once the spawn has been attempted: ``child`` is there, or
        # ``status`` says why not.  A stop that arrives during the spawn
        # waits for it, then stops what it started.
        self.spawned = trio.Event()
        # Set the moment the run is over (reaped, or never started), with
        # ``status`` already set: from then on nothing signals its PID.
        self.ended = trio.Event()

    @property
    def alive(self) -> bool:
        """True from a successful spawn until the process is reaped."""
        return self.child is not None and not self.ended.is_set()

    @property
    def pid(self) -> int | None:
        return self.child.pid if self.alive and self.child is not None else None

    async def spawn(self, inherited_fds: tuple[int, ...] = (), already_started: AlreadyStarted | None = None) -> bool:
        """Start the process; False (with ``status`` set, the reason logged)
        if it could not be started."""
        try:
            self.child = await open_child(self.spec, inherited_fds, already_started)
        except (OSError, subprocess.SubprocessError) as exc:
            self.status = spawn_failure(self.spec, exc)
            self.ended.set()
            return False
        finally:
            self.spawned.set()
        # Name and PID only: the command may hold a secret substituted from
        # the environment (--token=${TOKEN}); `supervisor check` shows it.
        log.info("started %s (pid %d)", self.spec.name, self.child.pid)
        return True

    async def watch(self) -> ExitStatus:
        """Pass the output on until the process exits; its exit status."""
        child = self.child
        assert child is not None, "watch() after a failed spawn"
        async with trio.open_nursery() as nursery:
            self._start_pumps(nursery, child)
            # Shielded: a process is always waited for (reaped) by its owner,
            # even while the surrounding task is being cancelled.
            with trio.CancelScope(shield=True):
                returncode = await child.wait()
            self.status = ExitStatus.from_returncode(returncode)
            self.ended.set()
            nursery.cancel_scope.deadline = trio.current_time() + _OUTPUT_DRAIN_SECONDS
        return self.status

    def _start_pumps(self, nursery: trio.Nursery, child: Child) -> None:
        # Prefixed lines (log_prefix), or the bytes as they came; both show
        # every line to the observers (supervisor logs).
        name = self.spec.name
        prefix = f"[{name}] ".encode()
        for source, writer in ((child.stdout, stdout_writer()), (child.stderr, stderr_writer())):
            if source is None:
                continue
            pump = (
                functools.partial(pump_lines, source, writer, prefix)
                if self.spec.log_prefix
                else functools.partial(pump_through, source, writer)
            )
            nursery.start_soon(functools.partial(pump, process_name=name, stream=writer.name, on_line=notify_line))

    def send_signal(self, signo: int, *, group: bool | None = None) -> bool:
        """Signal the process (its group if it has its own, unless ``group``
        is False).  False if it is not alive.  Safe against PID reuse: a
        reaped process is never signalled, and a child's PID is not reused
        before it is reaped."""
        child = self.child
        if child is None or not self.alive:
            return False
        use_group = self.spec.process_group if group is None else group and self.spec.process_group
        try:
            if use_group:
                os.killpg(child.pid, signo)
            else:
                os.kill(child.pid, signo)
        except ProcessLookupError:
            return False
        return True

    async def terminate(self, deadline: Deadline, signo: int) -> ExitStatus | None:
        """Send ``signo``, wait up to ``stop_timeout`` within ``deadline``,
        then SIGKILL (the group).  The run's status, None if it never ran."""
        timeout = self.spec.stop_timeout if self.spec.stop_timeout is not None else float("inf")
        with deadline.scope(keep_reserve=False, timeout=timeout):
            await self.spawned.wait()
            if self.alive:
                log.info(
                    "stopping %s (pid %s) with %s, up to %s",
                    self.spec.name,
                    self.pid,
                    signal_name(signo),
                    format_duration(min(timeout, deadline.remaining())),
                )
                self.send_signal(signo)
                # A stopped process (SIGSTOP, a debugger) cannot act on its
                # stop signal until it is continued.  Whatever its state, as
                # runit's `sv down` and s6's do: a SIGSTOP sent just before
                # may not have taken effect yet.
                self.send_signal(signal.SIGCONT)
                await self.ended.wait()
        if self.alive:
            why = "the shutdown deadline" if deadline.remaining() <= 0 else f"stop_timeout {format_duration(timeout)}"
            log.warning("escalating: SIGKILL to %s (pid %s) after %s", self.spec.name, self.pid, why)
            self.send_signal(signal.SIGKILL)
            with trio.CancelScope(shield=True), trio.move_on_after(_AFTER_KILL_SECONDS):
                await self.ended.wait()
        return self.status
