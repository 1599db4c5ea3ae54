"""Running one command: its own process group, its output in the log, a timeout.

The command is spawned with ``process_group=0`` so that a timeout stops
everything it started (a shell script's children too), and waited for through
trio's ``Process.wait`` only: the supervisor's init layer reaps orphans, and no
code here may call ``waitpid(-1)`` and steal another process's exit status.
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial

import trio

from supervisor import Context, Deadline, ExitStatus

from ._spec import Command

__all__ = ["Result", "run_command"]

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


async def run_command(
    command: Command,
    ctx: Context,
    *,
    env: Mapping[str, str],
    deadline: Deadline | None,
    output: trio.Nursery,
) -> Result:
    """Run ``command`` to completion, its timeout, or the caller's cancellation.

    ``output`` is a nursery that outlives the command, for the task that logs
    its output; keeping that task out of this one means a cancellation
    reaches the caller as a plain ``trio.Cancelled``.  A non-zero exit or a
    timeout is logged and returned, never raised.
    """
    with ctx.timeline.step(command.phase, command.name, plugin=ctx.plugin) as step:
        result = await _run(command, ctx, env=env, deadline=deadline, output=output)
        step.outcome = result.outcome
        step.detail = result.detail
    return result


async def _run(
    command: Command,
    ctx: Context,
    *,
    env: Mapping[str, str],
    deadline: Deadline | None,
    output: trio.Nursery,
) -> Result:
    log = ctx.log
    started = trio.current_time()
    try:
        proc = await trio.lowlevel.open_process(
            list(command.argv),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env={**os.environ, **env, **command.env},
            cwd=command.cwd,
            process_group=0,
        )
    except OSError as exc:
        reason = f"{exc.strerror}: {exc.filename}" if exc.filename else str(exc)
        log.error("%s: cannot start: %s", command.name, reason)  # noqa: TRY400 -- no traceback for a typo
        return Result("error", f"cannot start: {reason}")
    log.info("%s: started (pid %d)", command.name, proc.pid)

    assert proc.stdout is not None  # stdout=PIPE
    reader = trio.CancelScope()
    output_done = trio.Event()
    emit = partial(log.info, "%s: %s", command.name)
    output.start_soon(_log_output, proc.stdout, emit, reader, output_done)
    try:
        returncode, how = await _wait(proc, command, ctx, deadline)
    finally:
        # A child left in the background may hold the pipe open for ever:
        # read on only briefly once the command itself is gone.
        reader.deadline = min(reader.deadline, trio.current_time() + _OUTPUT_DRAIN)
    # Its last lines come before the verdict in the log.
    await output_done.wait()

    if returncode is None:
        return Result("timeout", f"after {command.timeout:.1f}s, {how}")
    status = ExitStatus.from_returncode(returncode)
    elapsed = trio.current_time() - started
    if status.success:
        log.info("%s: %s after %.1fs", command.name, status, elapsed)
        return Result("ok", status=status)
    log.warning("%s: %s after %.1fs", command.name, status, elapsed)
    return Result("error", str(status), status)


async def _wait(
    proc: trio.Process, command: Command, ctx: Context, deadline: Deadline | None
) -> tuple[int | None, str]:
    """Wait for the command within its timeout; stop it if that runs out.

    Returns its return code, or None and how it was stopped.
    """
    try:
        with trio.move_on_after(math.inf if command.timeout is None else command.timeout):
            return await proc.wait(), ""
    except trio.Cancelled:
        # From outside: the deadline, or a second SIGTERM that expired it.
        # What is left of the budget belongs to the plan's own stops.
        grace = command.kill_after
        if deadline is not None:
            grace = min(grace, deadline.remaining() / 2)
        ctx.log.warning("%s: cancelled by the shutdown deadline; stopping it", command.name)
        await _stop(proc, grace, log_name=command.name, ctx=ctx)
        raise
    how = await _stop(proc, command.kill_after, log_name=command.name, ctx=ctx)
    ctx.log.warning("%s: timed out after %.1fs; %s", command.name, command.timeout, how)
    return None, how


async def _stop(proc: trio.Process, grace: float, *, log_name: str, ctx: Context) -> str:
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
    ctx.log.error("%s: pid %d still there %.1fs after SIGKILL", log_name, proc.pid, _REAP_BOUND)
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
