"""How one run's OS process comes to be: spawned by trio, or adopted.

The process is spawned by trio (``trio.lowlevel.open_process``) and waited
for by PID through trio's pidfd machinery; nothing here reaps any other
child, so the exit status is always the process's own (reaping orphans is
the init layer's job, in another process).  A main process started before
trio existed (``supervisor._run.prespawn_main``) is adopted and waited for the
same way.
"""

from __future__ import annotations

import errno
import logging
import os
import shlex
import subprocess
from typing import Protocol, TypeAlias

import trio

from .._compiled import StartedFromPlan
from .._status import ExitStatus
from ..config import ProcessSpec
from ..pid1.exits import ExitCode
from .spawn import spawn_options

__all__ = ["AlreadyStarted", "Child", "open_child", "shell_join", "spawn_failure"]

log = logging.getLogger("supervisor.process")

# The main process as started before trio: by subprocess (the command line's
# prespawn) or by the compiled plan's fork and exec.
AlreadyStarted: TypeAlias = subprocess.Popen[bytes] | StartedFromPlan


class Child(Protocol):
    """What a run needs of its OS process: trio's Process, or an adopted one."""

    @property
    def pid(self) -> int: ...

    @property
    def stdout(self) -> trio.abc.ReceiveStream | None: ...

    @property
    def stderr(self) -> trio.abc.ReceiveStream | None: ...

    async def wait(self) -> int: ...


async def open_child(
    spec: ProcessSpec, inherited_fds: tuple[int, ...], already_started: AlreadyStarted | None
) -> Child:
    """Start ``spec`` (or adopt ``already_started``, which was started from
    it); raises what a spawn raises: OSError, SubprocessError."""
    if isinstance(already_started, StartedFromPlan):
        log.debug("%s (pid %d) was started from the compiled plan", spec.name, already_started.pid)
        return _AdoptedPid(already_started)
    if already_started is not None:
        return _Adopted(already_started)
    o = spawn_options(spec, inherited_fds)
    return await trio.lowlevel.open_process(o.argv, **o.popen_kwargs())


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


class _AdoptedPid:
    """A child the compiled plan forked and executed: waited for through its
    pidfd, then reaped by its PID alone (``os.waitpid``), so no other child's
    status can be taken for its."""

    def __init__(self, started: StartedFromPlan) -> None:
        self.pid = started.pid
        self._pidfd = os.pidfd_open(started.pid)
        self.stdout = None if started.stdout is None else trio.lowlevel.FdStream(started.stdout)
        self.stderr = None if started.stderr is None else trio.lowlevel.FdStream(started.stderr)

    async def wait(self) -> int:
        try:
            await trio.lowlevel.wait_readable(self._pidfd)
            _pid, status = os.waitpid(self.pid, 0)
            # As Popen.returncode: the exit code, or minus the signal.
            return os.waitstatus_to_exitcode(status)
        finally:
            os.close(self._pidfd)


def _adopt_pipe(popen: subprocess.Popen[bytes], name: str) -> trio.lowlevel.FdStream | None:
    pipe = getattr(popen, name)
    if pipe is None:
        return None
    fd = os.dup(pipe.fileno())
    pipe.close()
    return trio.lowlevel.FdStream(fd)


def spawn_failure(spec: ProcessSpec, exc: BaseException) -> ExitStatus:
    """Log why ``spec`` could not be started and return the status a shell
    would have reported for it: 127 for a command (or directory) that is not
    there, 126 for one that cannot be executed."""
    program = spec.command[0]
    if isinstance(exc, FileNotFoundError) and exc.filename == spec.cwd and spec.cwd:
        log.error("cannot start %s: working directory %s does not exist", spec.name, spec.cwd)
        return ExitStatus(code=int(ExitCode.NOT_FOUND))
    if isinstance(exc, FileNotFoundError):
        log.error("cannot start %s: %s: command not found", spec.name, program)
        return ExitStatus(code=int(ExitCode.NOT_FOUND))
    if isinstance(exc, OSError) and exc.errno in (errno.EACCES, errno.ENOEXEC, errno.EISDIR, errno.EPERM):
        log.error("cannot start %s: %s: %s (not executable)", spec.name, program, exc.strerror)
        return ExitStatus(code=int(ExitCode.NOT_EXECUTABLE))
    log.error("cannot start %s: %s", spec.name, exc)
    return ExitStatus(code=int(ExitCode.NOT_EXECUTABLE))


def shell_join(argv: tuple[str, ...], limit: int = 120) -> str:
    """The command for a log line: one line, and not a whole inline script."""
    text = " ".join(shlex.join(argv).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
