"""How a process is started: the options both spawn paths share.

Trio-free on purpose: the command line may start the main process before
trio is imported (``supervisor._run.prespawn_main``), and the orchestrator
starts every other one through ``trio.lowlevel.open_process``; both must give
the child the same environment, descriptors, process group and privileges.
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..config import ProcessSpec
from .capture import captured

__all__ = ["SpawnOptions", "raise_open_files_limit", "spawn_options", "start_now"]

# The limit on open files the runtime gave us, for the children, once the
# orchestrator has raised its own (None: not raised).
_children_nofile: tuple[int, int] | None = None


def raise_open_files_limit() -> None:
    """Raise this process's soft limit on open files to its hard limit.

    Several container runtimes give 1024; the orchestrator's descriptors
    (connections to the probe port and the control socket, the output pipes
    of every process) must not run out before a restart's pipes are made.
    The children get the soft limit the runtime gave, as they would without
    a supervisor: some programs (select() users) depend on it staying low.
    """
    global _children_nofile
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard in (soft, resource.RLIM_INFINITY):
        return
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (OSError, ValueError):
        return
    _children_nofile = (soft, hard)


@dataclass(frozen=True)
class SpawnOptions:
    argv: list[str]
    env: Mapping[str, str]
    cwd: str | None
    stdin: int | None
    stdout: int | None
    stderr: int | None
    pass_fds: tuple[int, ...]
    process_group: int | None
    preexec_fn: Callable[[], None] | None

    def popen_kwargs(self) -> dict[str, Any]:
        """The keyword arguments of ``subprocess.Popen`` and of
        ``trio.lowlevel.open_process``, which takes the same ones."""
        return {
            "env": self.env,
            "cwd": self.cwd,
            "stdin": self.stdin,
            "stdout": self.stdout,
            "stderr": self.stderr,
            "close_fds": True,
            "pass_fds": self.pass_fds,
            "process_group": self.process_group,
            "preexec_fn": self.preexec_fn,
        }


def spawn_options(spec: ProcessSpec, inherited_fds: tuple[int, ...] = ()) -> SpawnOptions:
    # Read by the supervisor (supervisor/runtime/capture.py), but for an
    # interactive main process, which keeps the terminal.
    piped = subprocess.PIPE if captured(spec) else None
    environ: Mapping[str, str] = os.environ
    preexec = None
    if spec.changes_privileges:
        # Imported here: most processes keep the supervisor's privileges, and
        # the module with its capability tables stays out of the memory of
        # a supervisor that never needs it.
        from .privileges import login_environment, preexec_for

        preexec, environ = preexec_for(spec), login_environment(spec, os.environ)
    preexec = _with_children_limit(preexec)
    if spec.main and spec.process_group and _stdin_is_a_terminal():
        preexec = _with_terminal(preexec)
    return SpawnOptions(
        argv=list(spec.command),
        # The configured env: wins over the user's login variables.
        env={**environ, **spec.env},
        cwd=spec.cwd,
        # Helpers get no stdin; the main process gets ours, like tini.
        stdin=None if spec.main else subprocess.DEVNULL,
        stdout=piped,
        stderr=piped,
        # Inherited descriptors (socket activation) go to the main process only.
        pass_fds=inherited_fds if spec.main else (),
        process_group=0 if spec.process_group else None,
        preexec_fn=preexec,
    )


def _with_children_limit(then: Callable[[], None] | None) -> Callable[[], None] | None:
    """In the child, between fork and exec: the soft limit on open files back
    to the runtime's (see ``raise_open_files_limit``), before ``then``.  Only
    when it was raised: a ``preexec_fn`` makes subprocess fork instead of
    vfork."""
    limits = _children_nofile
    if limits is None:
        return then
    setrlimit, nofile = resource.setrlimit, resource.RLIMIT_NOFILE

    def restore_limit() -> None:
        setrlimit(nofile, limits)
        if then is not None:
            then()

    return restore_limit


def _stdin_is_a_terminal() -> bool:
    try:
        return os.isatty(0)
    except OSError:
        return False


def _with_terminal(then: Callable[[], None] | None) -> Callable[[], None]:
    """In the child, between fork and exec: make its new process group the
    terminal's foreground group, as tini does, before it can read the
    terminal (a background read would stop it with SIGTTIN) — and so that
    Ctrl-C reaches it.  Done in the child, not after the spawn, so there is
    no window.  SIGTTOU is blocked around the call: the child is still in
    the background when it asks."""

    def hand_over_terminal() -> None:
        previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTTOU})
        try:
            os.tcsetpgrp(0, os.getpgrp())
        except OSError:
            pass  # not our terminal after all: nothing to hand over
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, previous)
        if then is not None:
            then()

    return hand_over_terminal


def start_now(spec: ProcessSpec, inherited_fds: tuple[int, ...] = ()) -> subprocess.Popen[bytes]:
    """Start ``spec`` synchronously; raises what ``subprocess.Popen`` raises.

    Called before trio exists: no other thread can hold a lock the child
    would need in its ``preexec_fn``.
    """
    o = spawn_options(spec, inherited_fds)
    return subprocess.Popen(o.argv, **o.popen_kwargs())
