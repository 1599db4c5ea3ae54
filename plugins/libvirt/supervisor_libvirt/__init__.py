"""The ``libvirt`` plugin: shut libvirt guests down before libvirtd stops.

SIGTERM to libvirtd leaves QEMU running, and libvirt-guests asks once and
never destroys.  This plugin, in the shutdown plan right before the
supervised libvirtd gets its stop signal (or in wind_down, beside pre_stop
but never cut short by the main process's exit, when libvirtd runs
elsewhere), presses every selected guest's ACPI power button, presses again
every ``resend_interval`` (a press during boot is lost), and destroys what is
still running when its time is up; or saves guests with ``mode:
managedsave`` (restored at the next start-up).  When the shutdown is cut
short (the deadline, a second SIGTERM) whatever still runs gets a last
destroy.  A background enforcer destroys domains whose requested shutdown
(``requested-at`` in their metadata, found as it is written) outlived its
grace::

    plugins:
      libvirt:
        process: libvirtd           # the supervised daemon (optional)
        uri: qemu:///system
        mode: shutdown              # or managedsave
        shutdown_timeout: 60s       # capped by the pod's grace period
        resend_interval: 5s
        enforcer: {resync_interval: 1m, grace: 5m}

Operators: ``supervisor libvirt request-shutdown DOMAIN --grace 60s``.
"""

from __future__ import annotations

import argparse

import trio

from supervisor import SKIP, Config, Context, Deadline, HookFailed, ProcessInfo, Settings, hookimpl

from ._settings import LibvirtSettings, parse

__all__ = ["LibvirtSettings"]

# How long the enforcer's connection may take to close once the shutdown has
# cancelled it: a local call's time; past it, the close ends in its thread.
_BACKGROUND_CLOSE = 0.5


@hookimpl
def supervisor_configure(settings: Settings, config: Config) -> LibvirtSettings:
    parsed = parse(settings, config)
    from ._binding import LibvirtFailure, libvirt_module  # imported only when enabled

    try:
        libvirt_module()
    except LibvirtFailure as exc:
        settings.error(None, f"{exc} (install libvirt-python and libvirt0)")
    return parsed


@hookimpl
def supervisor_add_commands(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
) -> None:
    from ._cli import add_commands

    add_commands(subparsers)


@hookimpl
async def supervisor_startup(ctx: Context) -> object:
    # Before any process starts, so before the guests' dependants.  With a
    # supervised libvirtd there is no daemon yet: see process_started.
    settings = _settings(ctx)
    if not settings.restore or settings.process is not None:
        return SKIP
    from ._connection import Hypervisor
    from ._restore import restore_saved

    async with Hypervisor(settings.uri, ctx.log) as hv:
        await restore_saved(hv, settings, ctx.log)
    return None


@hookimpl
async def supervisor_process_started(ctx: Context, process: ProcessInfo) -> object:
    # The supervised libvirtd was just spawned: restore once it answers.
    # Not awaited by the supervisor, so the daemon's dependants may start
    # meanwhile (there is no hook between a process's start and its
    # dependants'); bounded by hook_timeout (30 s by default).
    settings = _settings(ctx)
    if not settings.restore or settings.process is None or process.name != settings.process:
        return SKIP
    from ._connection import Hypervisor
    from ._restore import restore_saved

    async with Hypervisor(settings.uri, ctx.log) as hv:
        await hv.wait_until_up()
        await restore_saved(hv, settings, ctx.log)
    return None


@hookimpl
async def supervisor_background(ctx: Context) -> None:
    settings = _settings(ctx)
    if not settings.enforcer.enabled:
        return
    from ._connection import Hypervisor
    from ._enforcer import Enforcer

    # Cancelled as the shutdown begins: the close must not hold the
    # orchestrator's exit behind calls still in flight.
    async with Hypervisor(settings.uri, ctx.log, close_by=lambda: trio.current_time() + _BACKGROUND_CLOSE) as hv:
        await Enforcer(hv, settings, ctx.log).run()


@hookimpl
async def supervisor_before_process_stop(ctx: Context, deadline: Deadline, process: ProcessInfo) -> object:
    settings = _settings(ctx)
    if settings.process is None or process.name != settings.process:
        return SKIP
    await _shut_down(ctx, settings, deadline, "before_process_stop")
    return None


@hookimpl
async def supervisor_wind_down(ctx: Context, deadline: Deadline) -> object:
    # Not pre_stop: that is cancelled (or skipped) when the main process
    # exits, and the guests of a libvirtd outside the pod would be left
    # running.  wind_down runs to its end, bounded by the deadline only.
    settings = _settings(ctx)
    if settings.process is not None:
        return SKIP
    await _shut_down(ctx, settings, deadline, "wind_down")
    return None


async def _shut_down(ctx: Context, settings: LibvirtSettings, deadline: Deadline, phase: str) -> None:
    from ._connection import Hypervisor
    from ._shutdown import Report, hook_end, shut_down_all

    report = Report(ctx.timeline, phase, ctx.plugin, ctx.log)
    threads = max(32, settings.max_parallel * 2)
    # The close may wait for calls still in flight: never past the hook's end.
    async with Hypervisor(settings.uri, ctx.log, threads=threads, close_by=hook_end(deadline, settings)) as hv:
        results = await shut_down_all(hv, settings, deadline, report)
    problem = report.problem(results)
    if problem is not None:  # logged already, guest by guest
        raise HookFailed(problem)


def _settings(ctx: Context) -> LibvirtSettings:
    if not isinstance(ctx.settings, LibvirtSettings):
        raise TypeError(f"unexpected settings for the libvirt plugin: {ctx.settings!r}")
    return ctx.settings
