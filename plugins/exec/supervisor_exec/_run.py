"""Running one command: its own process group, its output in the log, a timeout.

The command is spawned with ``process_group=0`` so that a timeout stops
everything it started (a shell script's children too), and waited for through
trio's ``Process.wait`` only: the supervisor's init layer reaps orphans, and no
code here may call ``waitpid(-1)`` and steal another process's exit status.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import signal
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial

import trio

from supervisor import Context, Deadline, ExitStatus, format_duration, why_cancelled

from ._spec import Command

__all__ = ["Result", "Runner"]

# Output is logged line by line; a longer "line" (a progress bar, a binary
# dump) is cut into pieces of this many bytes so one record stays readable.
_MAX_LINE = 8192
# After a command exits, a child it left in the background may still hold its
# output pipe; wait this long for the rest of the output, then stop reading.
_OUTPUT_DRAIN = 1.0
# A SIGKILLed process is gone within milliseconds unless it is stuck in the
# kernel (a dead NFS mount); the shutdown must not wait for it forever.
_REAP_BOUND = 1.0


@dataclass(frozen=True, slots=True)
class Result:
    """How a command ended: ``outcome`` is a timeline word (ok, error, timeout)."""

    outcome: str
    detail: str = ""
    status: ExitStatus | None = None


@dataclass(frozen=True, slots=True)
class Runner:
    """Runs the commands of one phase.

    ``env`` is added to every command's environment.  ``output`` is a nursery
    that outlives the commands, for the tasks that log their output: keeping
    those out of a command's own task means a cancellation reaches the
    caller as a plain ``trio.Cancelled``, and the timeline records it so.
    """

    ctx: Context
    env: Mapping[str, str]
    deadline: Deadline | None
    output: trio.Nursery

    async def run(self, command: Command) -> Result:
        """Run ``command`` to completion, its timeout, or the caller's cancellation.

        A non-zero exit or a timeout is logged and returned, never raised.
        """
        with self.ctx.timeline.step(command.phase, command.name, plugin=self.ctx.plugin) as step:
            result = await self._run(command)
            step.outcome = result.outcome
            step.detail = result.detail
        return result

    async def _run(self, command: Command) -> Result:
        log = self.ctx.log
        started = trio.current_time()
        try:
            proc = await trio.lowlevel.open_process(
                list(command.argv),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                env={**os.environ, **self.env, **command.env},
                cwd=command.cwd,
                process_group=0,
            )
        except OSError as exc:
            reason = f"{exc.strerror}: {exc.filename}" if exc.filename else str(exc)
            log.error("%s: cannot start: %s", command.name, reason)  # noqa: TRY400 -- a typo needs no traceback
            return Result("error", f"cannot start: {reason}")
        log.info("%s: started (pid %d)", command.name, proc.pid)

        assert proc.stdout is not None  # stdout=PIPE
        reader = trio.CancelScope()
        output_done = trio.Event()
        emit = partial(log.info, "%s: %s", command.name)
        self.output.start_soon(_log_output, proc.stdout, emit, reader, output_done)
        try:
            returncode, how = await self._wait(proc, command)
        finally:
            # A child left in the background may hold the pipe open for ever:
            # read on only briefly once the command itself is gone.
            reader.deadline = min(reader.deadline, trio.current_time() + _OUTPUT_DRAIN)
        # Its last lines come before the verdict in the log.
        await output_done.wait()

        if returncode is None:
            return Result("timeout", how)
        status = ExitStatus.from_returncode(returncode)
        elapsed = format_duration(trio.current_time() - started)
        if status.success:
            log.info("%s: %s after %s", command.name, status, elapsed)
            return Result("ok", status=status)
        log.warning("%s: %s after %s", command.name, status, elapsed)
        return Result("error", str(status), status)

    async def _wait(self, proc: trio.Process, command: Command) -> tuple[int | None, str]:
        """Wait for the command within its timeout; stop it if that runs out.

        Returns its return code, or None and when and how it was stopped.
        """
        log = self.ctx.log
        timeout = math.inf if command.timeout is None else command.timeout
        try:
            with trio.move_on_after(timeout):
                return await proc.wait(), ""
        except trio.Cancelled:
            # From outside: the deadline, or a second SIGTERM that expired it.
            # Cancelled by the deadline, what is left before escalation is
            # the reserve the plan keeps for its own stop signals and SIGKILL:
            # the command's SIGTERM grace takes at most half of it, so the
            # processes' stops still get the other half.
            grace = command.kill_after
            if self.deadline is not None:
                grace = self.deadline.slack(grace, 0.5, of=self.deadline.remaining())
            reason = why_cancelled(self.ctx, self.deadline)
            log.warning("%s: cancelled by %s; stopping it", command.name, reason)
            await _stop(proc, grace, command.name, log)
            raise
        how = await _stop(proc, command.kill_after, command.name, log)
        after = format_duration(timeout)
        log.warning("%s: timed out after %s; %s", command.name, after, how)
        return None, f"after {after}, {how}"


async def _stop(proc: trio.Process, grace: float, name: str, log: logging.Logger) -> str:
    """SIGTERM to the command's process group, SIGKILL after ``grace``.

    Shielded, so that a cancellation cannot leave the group running, and
    bounded, so that it cannot hold up the shutdown.  Returns what it took.
    """
    with trio.CancelScope(shield=True):
        _signal_group(proc.pid, signal.SIGTERM)
        with trio.move_on_after(grace):
            await proc.wait()
        exited_on_term = proc.returncode is not None
        # Also after a leader that went on TERM: children it left behind get
        # no more time than it had.
        _signal_group(proc.pid, signal.SIGKILL)
        if not exited_on_term:
            with trio.move_on_after(_REAP_BOUND):
                await proc.wait()
    if exited_on_term:
        return "terminated"
    if proc.returncode is not None:
        return "killed"
    log.error("%s: pid %d still there %s after SIGKILL", name, proc.pid, format_duration(_REAP_BOUND))
    return "killed, still exiting"


def _signal_group(pgid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):  # the whole group is gone already
        os.killpg(pgid, signum)


async def _log_output(
    stream: trio.abc.ReceiveStream,
    emit: Callable[[str], None],
    scope: trio.CancelScope,
    done: trio.Event,
) -> None:
    """Log ``stream`` line by line until EOF or until ``scope`` is cancelled."""
    pending = b""
    try:
        with scope:
            async for chunk in stream:
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    _emit_line(line, emit)
                if len(pending) > _MAX_LINE:
                    _emit_line(pending, emit)
                    pending = b""
    finally:
        if pending:
            _emit_line(pending, emit)
        done.set()
        await trio.aclose_forcefully(stream)


def _emit_line(line: bytes, emit: Callable[[str], None]) -> None:
    while len(line) > _MAX_LINE:
        emit(line[:_MAX_LINE].decode(errors="replace"))
        line = line[_MAX_LINE:]
    emit(line.rstrip(b"\r").decode(errors="replace"))
