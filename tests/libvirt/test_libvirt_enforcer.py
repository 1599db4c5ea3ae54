"""The deletion-deadline enforcer on the test:///default driver."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import pytest
import trio
from supervisor_libvirt import _domains
from supervisor_libvirt._connection import Hypervisor
from supervisor_libvirt._domains import Selection
from supervisor_libvirt._enforcer import Enforcer
from supervisor_libvirt._metadata import KEY, NAMESPACE, ShutdownRequest
from supervisor_libvirt._settings import EnforcerSettings, LibvirtSettings

from tests.libvirt import lv_testdriver as td
from tests.libvirt.lv_enforcer import start_after_first_pass

LOG = logging.getLogger("supervisor.plugin.libvirt")


def request(dom: Any, requested_at: float, grace: float | None = None) -> None:
    xml = ShutdownRequest(requested_at=requested_at, grace=grace).to_xml()
    dom.setMetadata(2, xml, KEY, NAMESPACE, 1)


def counting_passes(enforcer: Enforcer) -> list[int]:
    """Count the enforcer's passes, in the one item of the list returned."""
    done = [0]
    resync_once = enforcer.resync

    async def counted(nursery: trio.Nursery) -> None:
        await resync_once(nursery)
        done[0] += 1

    enforcer.resync = counted  # type: ignore[method-assign]
    return done


async def run_enforcer(
    until: Callable[[Enforcer], bool] = lambda _: True,
    *,
    passes: int = 3,
    settings: LibvirtSettings | None = None,
    resync: float = 0.1,
    grace: float = 300.0,
) -> Enforcer:
    """Run the enforcer until ``until(enforcer)`` holds and it has made at
    least ``passes`` passes: as long as that takes on a loaded machine, not
    for a guessed time."""
    if settings is None:
        settings = LibvirtSettings(uri=td.URI, enforcer=EnforcerSettings(resync_interval=resync, grace=grace))
    async with Hypervisor(td.URI, LOG) as hv:
        enforcer = Enforcer(hv, settings, LOG)
        done = counting_passes(enforcer)
        with trio.fail_after(20):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(enforcer.run)
                while done[0] < passes or not until(enforcer):
                    await trio.sleep(0.01)
                nursery.cancel_scope.cancel()
    return enforcer


async def test_overdue_domain_is_destroyed_and_others_are_left_alone(
    testconn: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    overdue = td.start(testconn, "t-overdue", stubborn=True)
    request(overdue, time.time() - 10, grace=5)
    td.start(testconn, "t-unmarked", stubborn=True)
    enforcer = await run_enforcer(lambda e: bool(e.destroyed))
    assert enforcer.destroyed == ["t-overdue"]
    assert td.state(testconn, "t-overdue") == (td.STATE_SHUTOFF, td.REASON_DESTROYED)
    assert td.state(testconn, "t-unmarked")[0] == td.STATE_RUNNING  # type: ignore[index]
    assert "t-unmarked" not in caplog.text


async def test_request_within_grace_is_resent_then_destroyed_once_grace_passes(
    testconn: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    dom = td.start(testconn, "t-stubborn", stubborn=True)
    started = time.time()
    request(dom, started, grace=1.5)
    enforcer = await run_enforcer(lambda e: bool(e.destroyed))
    assert enforcer.destroyed == ["t-stubborn"]
    resent = caplog.text.count("t-stubborn: shutdown requested")
    assert resent >= 3  # one per pass (0.1 s) during the 1.5 s grace: about fifteen
    assert "destroying it" in caplog.text
    assert time.time() - started >= 1.5


async def test_graceful_domain_shuts_down_on_the_request(testconn: Any) -> None:
    dom = td.start(testconn, "t-graceful")
    request(dom, time.time(), grace=60)
    enforcer = await run_enforcer(lambda _: td.state(testconn, "t-graceful") == (td.STATE_SHUTOFF, td.REASON_SHUTDOWN))
    assert enforcer.destroyed == []
    assert td.state(testconn, "t-graceful") == (td.STATE_SHUTOFF, td.REASON_SHUTDOWN)


async def test_default_grace_applies_when_the_request_has_none(testconn: Any) -> None:
    dom = td.start(testconn, "t-stubborn", stubborn=True)
    request(dom, time.time() - 2)
    enforcer = await run_enforcer(lambda e: bool(e.destroyed), grace=1.0)
    assert enforcer.destroyed == ["t-stubborn"]


async def test_invalid_request_is_reported_once_and_ignored(testconn: Any, caplog: pytest.LogCaptureFixture) -> None:
    dom = td.start(testconn, "t-bad", stubborn=True)
    dom.setMetadata(2, '<shutdown requested-at="yesterday"/>', KEY, NAMESPACE, 1)
    enforcer = await run_enforcer(passes=4)
    assert enforcer.destroyed == []
    assert caplog.text.count("ignoring invalid shutdown request") == 1
    assert "requested-at: invalid time 'yesterday'" in caplog.text
    assert td.state(testconn, "t-bad")[0] == td.STATE_RUNNING  # type: ignore[index]


async def test_a_stale_list_does_not_destroy_the_restarted_guest(
    testconn: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    dom = td.start(testconn, "t-restarted", stubborn=True)
    request(dom, time.time() - 10, grace=5)
    settings = LibvirtSettings(uri=td.URI, enforcer=EnforcerSettings(resync_interval=60))
    async with Hypervisor(td.URI, LOG) as hv, trio.open_nursery() as nursery:
        enforcer = Enforcer(hv, settings, LOG)
        listed = await hv.call(_domains.list_domains(unselected=True))
        await enforcer.resync(nursery)
        with trio.fail_after(10):
            while not enforcer.destroyed:
                await trio.sleep(0.01)
        # The guest starts again (a new boot, no request) while a list taken
        # before the destroy is still being answered.
        dom.create()
        monkeypatch.setattr(_domains, "list_domains", lambda *_a, **_k: lambda _conn: listed)
        await enforcer.resync(nursery)
        # The nursery now waits for whatever that pass started.
    assert enforcer.destroyed == ["t-restarted"]
    assert caplog.text.count("t-restarted: shutdown requested at") == 1
    assert td.state(testconn, "t-restarted")[0] == td.STATE_RUNNING  # type: ignore[index]


async def test_requests_outside_the_selection_or_in_the_definition_only_are_reported_not_enforced(
    testconn: Any, caplog: pytest.LogCaptureFixture
) -> None:
    excluded = td.start(testconn, "t-x1", stubborn=True)
    request(excluded, time.time() - 10, grace=1)
    td.start(testconn, "t-x2").setMetadata(2, '<shutdown requested-at="yesterday"/>', KEY, NAMESPACE, 1)
    xml = ShutdownRequest(requested_at=time.time() - 10, grace=1).to_xml()
    # --config alone on a running guest: the persistent definition only.
    td.start(testconn, "t-defined", stubborn=True).setMetadata(2, xml, KEY, NAMESPACE, 2)
    # --live --config: the live copy counts.
    td.start(testconn, "t-both", stubborn=True).setMetadata(2, xml, KEY, NAMESPACE, 1 | 2)
    # Written while it was off: every start copies it into the live definition.
    carried = td.start(testconn, "t-carried", stubborn=True)
    carried.destroy()
    carried.setMetadata(2, xml, KEY, NAMESPACE, 2)
    carried.create()
    selected = td.start(testconn, "t-selected", stubborn=True)
    request(selected, time.time() - 10, grace=1)
    settings = LibvirtSettings(
        uri=td.URI,
        selection=Selection(names=("t-*",), exclude=("t-x*",)),
        enforcer=EnforcerSettings(resync_interval=0.1),
    )
    enforcer = await run_enforcer(lambda e: len(e.destroyed) == 3, passes=4, settings=settings)
    assert sorted(enforcer.destroyed) == ["t-both", "t-carried", "t-selected"]
    assert td.state(testconn, "t-x1")[0] == td.STATE_RUNNING  # type: ignore[index]
    assert td.state(testconn, "t-defined")[0] == td.STATE_RUNNING  # type: ignore[index]
    assert caplog.text.count("t-x1: shutdown request not acted on: the plugin's selection leaves") == 1
    assert caplog.text.count("t-x2: shutdown request not acted on") == 1  # not judged: not ours
    assert "t-x2: ignoring" not in caplog.text
    assert caplog.text.count("t-defined: ignoring the shutdown request in its persistent definition only") == 1


async def test_the_destroy_comes_at_the_due_time_not_at_the_next_pass(testconn: Any) -> None:
    dom = td.start(testconn, "t-timed", stubborn=True)
    request(dom, time.time(), grace=0.5)
    settings = LibvirtSettings(uri=td.URI, enforcer=EnforcerSettings(resync_interval=60))
    async with Hypervisor(td.URI, LOG) as hv:
        enforcer = Enforcer(hv, settings, LOG)
        with trio.fail_after(20):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(enforcer.run)
                while not enforcer.destroyed:
                    await trio.sleep(0.01)
                nursery.cancel_scope.cancel()
    assert enforcer.destroyed == ["t-timed"]
    [lag] = enforcer.lag
    assert 0 <= lag < 10.0  # the next pass is 60 s away (the precision itself: benchmarks/)


async def test_a_request_written_while_it_runs_is_found_at_once_not_at_the_next_pass(testconn: Any) -> None:
    dom = td.start(testconn, "t-late", stubborn=True)
    settings = LibvirtSettings(uri=td.URI, enforcer=EnforcerSettings(resync_interval=60))
    async with Hypervisor(td.URI, LOG) as hv:
        enforcer = Enforcer(hv, settings, LOG)
        with trio.fail_after(20):
            async with trio.open_nursery() as nursery:
                await start_after_first_pass(nursery, enforcer)  # the next pass is 60 s away
                written = time.time()
                await trio.to_thread.run_sync(request, dom, written - 10, 1.0)  # 9 s overdue
                while not enforcer.destroyed:
                    await trio.sleep(0.01)
                nursery.cancel_scope.cancel()
    assert enforcer.destroyed == ["t-late"]
    [lag] = enforcer.lag
    # Found by its metadata-change event: the next pass would have come 60 s
    # after the first, past the fail_after.
    assert 9.0 <= lag < 30.0


def test_a_guest_stopped_while_listing_is_left_out_not_the_whole_list(testconn: Any) -> None:
    running = td.start(testconn, "t-running")
    stopped = td.start(testconn, "t-stopped")
    stopped.destroy()  # as if it stopped between the list and the look at its metadata

    class Listed:
        def listAllDomains(self, _flags: int) -> list[Any]:
            return [stopped, running]

    names = [domain.name for domain in _domains.list_domains()(Listed())]
    assert names == ["t-running"]


async def test_requests_written_elsewhere_do_not_press_known_requests_again(
    testconn: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    known = td.start(testconn, "t-known", stubborn=True)
    request(known, time.time(), grace=120)
    others = [td.start(testconn, f"t-other-{i}") for i in range(3)]
    settings = LibvirtSettings(uri=td.URI, enforcer=EnforcerSettings(resync_interval=60))
    async with Hypervisor(td.URI, LOG) as hv:
        enforcer = Enforcer(hv, settings, LOG)
        passes = counting_passes(enforcer)
        with trio.fail_after(20):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(enforcer.run)
                for i, other in enumerate(others, start=1):
                    while passes[0] < i:
                        await trio.sleep(0.01)
                    # A metadata change elsewhere (not a request): a pass, no press.
                    await trio.to_thread.run_sync(other.setMetadata, 2, "<x/>", "x", "urn:example:x", 1)
                while passes[0] < len(others) + 1:
                    await trio.sleep(0.01)
                nursery.cancel_scope.cancel()
    assert caplog.text.count("enforcer: t-known: shutdown requested") == 1
