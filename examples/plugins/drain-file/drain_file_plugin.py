"""drain-file: tell an app's readiness probe that the pod is going away.

A worked example of a third-party pid1-supervisor plugin.  Many apps cannot
be told to "stop being ready", but their readiness probe can look for a file::

    readinessProbe:
      exec: {command: ["sh", "-c", "test ! -e /run/drain/draining"]}

With this plugin enabled::

    plugins:
      drain-file:
        path: /run/drain/draining
        delay: 5s          # how long readiness probes get to notice
        process: web       # remove the file once this process stopped (default: the main one)

the shutdown writes the marker in ``pre_stop``, waits ``delay`` (less if the
main process exits first or the deadline is near), lets the processes stop,
and removes the marker after ``process`` has stopped.  A marker left over
from an earlier run of the container is removed at start-up.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import trio

from supervisor import SKIP, Config, Context, Deadline, ExitStatus, ProcessInfo, Settings, hookimpl

__all__ = ["DrainFile"]


@dataclass(frozen=True, slots=True)
class DrainFile:
    """The parsed settings; the host passes them back as ``ctx.settings``."""

    path: str
    delay: float = 5.0
    content: str = "draining\n"
    process: str | None = None  # None: remove the marker only at post_stop


@hookimpl
def supervisor_configure(settings: Settings, config: Config) -> DrainFile:
    settings.check_keys(["path", "delay", "content", "process"])
    path = settings.string("path", required=True) or ""
    if path and not os.path.isabs(path):
        settings.error("path", f"must be an absolute path, not {path!r}")
    delay = settings.duration("delay", 5.0)
    content = settings.string("content", "draining\n")
    process = settings.string("process")
    names = [p.name for p in config.processes]
    if process is None:
        process = config.main.name if config.main else None
    elif process not in names:
        settings.error("process", f"unknown process {process!r} (processes: {', '.join(names)})")
    return DrainFile(path=path, delay=delay, content=content, process=process)


def _settings(ctx: Context) -> DrainFile:
    if not isinstance(ctx.settings, DrainFile):
        raise TypeError(f"unexpected settings for drain-file: {ctx.settings!r}")
    return ctx.settings


# A hook with nothing to do returns SKIP, so that it stays out of the
# shutdown timeline: per-process hooks are called for every process, and the
# timeline would otherwise fill with rows that did nothing.


@hookimpl
async def supervisor_startup(ctx: Context) -> object:
    # A container restarted in the same pod keeps its emptyDir volumes; a
    # stale marker would keep the new instance out of the Service for good.
    settings = _settings(ctx)
    marker = trio.Path(settings.path)
    if not await marker.exists():
        return SKIP
    ctx.log.info("removing a stale drain marker %s", settings.path)
    await marker.unlink(missing_ok=True)
    return None


@hookimpl
async def supervisor_pre_stop(ctx: Context, deadline: Deadline) -> None:
    settings = _settings(ctx)
    marker = trio.Path(settings.path)
    await marker.parent.mkdir(parents=True, exist_ok=True)
    # Write then rename, so that a probe never reads half a file.
    partial = marker.with_name(f".{marker.name}.tmp")
    await partial.write_text(settings.content)
    await partial.rename(marker)
    delay = min(settings.delay, deadline.remaining_for_hooks())
    ctx.log.info("wrote drain marker %s; waiting %.1fs for readiness probes", settings.path, delay)
    with trio.move_on_after(delay):
        await ctx.main_exited.wait()
        ctx.log.info("the main process exited; not waiting any longer")


@hookimpl
async def supervisor_after_process_stop(
    ctx: Context, deadline: Deadline, process: ProcessInfo, status: ExitStatus
) -> object:
    if process.name != _settings(ctx).process:
        return SKIP
    return await _remove(ctx)


@hookimpl
async def supervisor_post_stop(ctx: Context, deadline: Deadline) -> object:
    # The marker's process may have exited before the shutdown began, and
    # then nothing else removes it.
    return await _remove(ctx)


async def _remove(ctx: Context) -> object:
    marker = trio.Path(_settings(ctx).path)
    if not await marker.exists():
        return SKIP
    await marker.unlink(missing_ok=True)
    ctx.log.info("removed drain marker %s", marker)
    return None
