"""The plugin's hooks as the host calls them: where the shutdown runs."""

from __future__ import annotations

import functools
import logging
import time
from dataclasses import dataclass
from typing import Any

import pytest
import supervisor_libvirt
import trio
from supervisor_libvirt import (
    supervisor_background,
    supervisor_before_process_stop,
    supervisor_configure,
    supervisor_startup,
    supervisor_wind_down,
)
from supervisor_libvirt._metadata import KEY, NAMESPACE, ShutdownRequest

from supervisor import SKIP, Context, Deadline, HookFailed, Settings, Timeline
from supervisor.config import Config, ProcessSpec
from tests.helpers import empty_host
from tests.libvirt import lv_testdriver as td

CONFIG = Config(
    processes=(
        ProcessSpec(name="libvirtd", command=("libvirtd",)),
        ProcessSpec(name="provider", command=("provider",), main=True),
    )
)


@dataclass
class FakeProcess:
    name: str
    spec: ProcessSpec
    pid: int | None = 1
    running: bool = True
    status: None = None
    restarts: int = 0


def context(section: dict[str, object]) -> Context:
    settings = Settings.from_mapping(
        {"uri": td.URI, "domains": ["t-*"], "shutdown_timeout": "1s", "resend_interval": "200ms", **section},
        path="plugins.libvirt",
    )
    parsed = supervisor_configure(settings=settings, config=CONFIG)
    assert settings.problems == []
    return Context(
        plugin="libvirt",
        settings=parsed,
        config=CONFIG,
        log=logging.getLogger("supervisor.plugin.libvirt"),
        processes={},
        timeline=Timeline(),
        main_exited=trio.Event(),
    )


def process(name: str) -> Any:
    (spec,) = [spec for spec in CONFIG.processes if spec.name == name]
    return FakeProcess(name, spec)


async def test_with_a_libvirtd_process_guests_go_right_before_it_stops(testconn: Any) -> None:
    td.start(testconn, "t-vm")
    ctx = context({"process": "libvirtd"})
    await supervisor_wind_down(ctx=ctx, deadline=Deadline(10))
    await supervisor_before_process_stop(ctx=ctx, deadline=Deadline(10), process=process("provider"))
    assert td.state(testconn, "t-vm")[0] == td.STATE_RUNNING  # type: ignore[index]
    await supervisor_before_process_stop(ctx=ctx, deadline=Deadline(10), process=process("libvirtd"))
    assert td.state(testconn, "t-vm") == (td.STATE_SHUTOFF, td.REASON_SHUTDOWN)
    assert [(s.phase, s.name, s.outcome) for s in ctx.timeline.steps] == [
        ("before_process_stop", "domain t-vm", "shut down")
    ]


async def test_without_a_libvirtd_process_guests_go_in_wind_down(testconn: Any) -> None:
    td.start(testconn, "t-vm", stubborn=True)
    ctx = context({})
    await supervisor_before_process_stop(ctx=ctx, deadline=Deadline(10), process=process("libvirtd"))
    assert ctx.timeline.steps == []
    await supervisor_wind_down(ctx=ctx, deadline=Deadline(10))
    assert [(s.phase, s.name, s.outcome) for s in ctx.timeline.steps] == [("wind_down", "domain t-vm", "destroyed")]


async def test_background_hook_runs_the_enforcer_until_cancelled(testconn: Any) -> None:
    dom = td.start(testconn, "t-overdue", stubborn=True)
    dom.setMetadata(2, ShutdownRequest(requested_at=time.time() - 60, grace=1).to_xml(), KEY, NAMESPACE, 1)
    ctx = context({"enforcer": {"resync_interval": "100ms"}})
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(functools.partial(supervisor_background, ctx=ctx))
            while td.state(testconn, "t-overdue") != (td.STATE_SHUTOFF, td.REASON_DESTROYED):
                await trio.sleep(0.05)
            nursery.cancel_scope.cancel()


async def test_background_hook_returns_at_once_when_the_enforcer_is_off() -> None:
    ctx = context({"enforcer": False})
    with trio.fail_after(1):
        await supervisor_background(ctx=ctx)


async def test_hook_timeout_in_the_section_does_not_stop_the_enforcer(testconn: Any) -> None:
    # The plugin's hook_timeout bounds its shutdown hooks, not its background
    # task: a request whose grace outlasts it is still enforced.
    dom = td.start(testconn, "t-later", stubborn=True)
    dom.setMetadata(2, ShutdownRequest(requested_at=time.time(), grace=1.5).to_xml(), KEY, NAMESPACE, 1)
    section = {"uri": td.URI, "domains": ["t-*"], "hook_timeout": "500ms", "enforcer": {"resync_interval": "100ms"}}
    config = Config(
        processes=CONFIG.processes,
        plugins={"libvirt": Settings.from_mapping(section, path="plugins.libvirt")},
    )
    host = empty_host()
    host.add("libvirt", supervisor_libvirt)
    host.enable(config)
    host.bind(config, {}, Timeline(), trio.Event())
    with trio.fail_after(15):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(functools.partial(host.call, "supervisor_background"))
            while td.state(testconn, "t-later") != (td.STATE_SHUTOFF, td.REASON_DESTROYED):
                await trio.sleep(0.05)
            nursery.cancel_scope.cancel()


async def test_startup_restores_what_the_plugin_saved_unless_switched_off(testconn: Any) -> None:
    td.start(testconn, "t-ours")
    td.start(testconn, "t-theirs").managedSave(0)  # saved, not by the plugin
    await supervisor_wind_down(ctx=context({"mode": "managedsave"}), deadline=Deadline(10))
    assert td.state(testconn, "t-ours") == (td.STATE_SHUTOFF, td.REASON_SAVED)
    assert await supervisor_startup(ctx=context({"restore": False})) is SKIP
    assert td.state(testconn, "t-ours") == (td.STATE_SHUTOFF, td.REASON_SAVED)
    await supervisor_startup(ctx=context({}))
    assert td.state(testconn, "t-ours")[0] == td.STATE_RUNNING  # type: ignore[index]
    assert td.state(testconn, "t-theirs") == (td.STATE_SHUTOFF, td.REASON_SAVED)
    # Restored once: the mark is gone with the image.
    testconn.lookupByName("t-ours").destroy()
    await supervisor_startup(ctx=context({}))
    assert td.state(testconn, "t-ours") == (td.STATE_SHUTOFF, td.REASON_DESTROYED)


async def test_the_hook_fails_when_guests_may_be_left_running(tmp_path: Any) -> None:
    # Its own row must not say "ok" above a domains row that says "failed".
    ctx = context({"uri": f"qemu:///system?socket={tmp_path}/missing-sock"})
    with pytest.raises(HookFailed, match=r"^cannot list domains: "):
        await supervisor_wind_down(ctx=ctx, deadline=Deadline(2))
    assert [(s.name, s.outcome) for s in ctx.timeline.steps] == [("domains", "failed")]
