"""How a process is started: the options both spawn paths share.

Trio-free on purpose: the command line may start the main process before
trio is imported (``supervisor.cli.prespawn_main``), and the orchestrator
starts every other one through ``trio.lowlevel.open_process``; both must give
the child the same environment, descriptors, process group and privileges.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from ..config import ProcessSpec
from .privileges import preexec_for

__all__ = ["SpawnOptions", "spawn_options", "start_now"]


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


def spawn_options(spec: ProcessSpec, inherited_fds: tuple[int, ...] = ()) -> SpawnOptions:
    piped = subprocess.PIPE if spec.log_prefix else None
    return SpawnOptions(
        argv=list(spec.command),
        env={**os.environ, **spec.env},
        cwd=spec.cwd,
        # Helpers get no stdin; the main process gets ours, like tini.
        stdin=None if spec.main else subprocess.DEVNULL,
        stdout=piped,
        stderr=piped,
        # Inherited descriptors (socket activation) go to the main process only.
        pass_fds=inherited_fds if spec.main else (),
        process_group=0 if spec.process_group else None,
        preexec_fn=preexec_for(spec),
    )


def start_now(spec: ProcessSpec, inherited_fds: tuple[int, ...] = ()) -> subprocess.Popen[bytes]:
    """Start ``spec`` synchronously; raises what ``subprocess.Popen`` raises."""
    o = spawn_options(spec, inherited_fds)
    return subprocess.Popen(
        o.argv,
        env=o.env,
        cwd=o.cwd,
        stdin=o.stdin,
        stdout=o.stdout,
        stderr=o.stderr,
        close_fds=True,
        pass_fds=o.pass_fds,
        process_group=o.process_group,
        # Called before trio exists: no other thread can hold a lock the
        # child would need.
        preexec_fn=o.preexec_fn,  # noqa: PLW1509
    )
