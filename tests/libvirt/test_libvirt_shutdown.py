"""The shutdown algorithm on the test:///default driver (fast, no QEMU)."""

from __future__ import annotations

import functools
import logging
import math
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

import libvirt
import pytest
import trio
from supervisor_libvirt import _domains
from supervisor_libvirt._connection import Hypervisor
from supervisor_libvirt._domains import Selection
from supervisor_libvirt._metadata import KEY, NAMESPACE, ShutdownRequest
from supervisor_libvirt._settings import EnforcerSettings, LibvirtSettings
from supervisor_libvirt._shutdown import Report, Result, shut_down_all

from supervisor import Deadline, Step, Timeline
from tests.libvirt import lv_testdriver as td

# These tests run on trio's real clock: every libvirt call is a worker thread,
# and an autojumping MockClock would skip ahead while a thread runs.  So they
# assert what a loaded machine cannot change: outcomes, the order of steps in
# the timeline, lower bounds (timers never fire early); an upper bound only
# far from the time it must stay short of.  The hook runs inside its
# deadline's scope, as the plugin host runs it: a step that needs more than
# its share is cut and shows so in its outcome.


def settings(**overrides: Any) -> LibvirtSettings:
    values: dict[str, Any] = {
        "uri": td.URI,
        "selection": Selection(names=("t-*",)),
        "shutdown_timeout": 1.0,
        "resend_interval": 0.2,
        "poll_interval": 0.05,
        "destroy_reserve": 0.2,
    }
    values.update(overrides)
    return LibvirtSettings(**values)


async def run(
    config: LibvirtSettings, budget: float = 10.0, log: logging.Logger | None = None
) -> tuple[dict[str, Result], Timeline, float]:
    timeline = Timeline()
    deadline = Deadline(budget)
    log = log or logging.getLogger("supervisor.plugin.libvirt")
    started = trio.current_time()
    async with Hypervisor(config.uri, log) as hv:
        with deadline.scope():
            results = await shut_down_all(hv, config, deadline, Report(timeline, "before_process_stop", "libvirt", log))
    return results, timeline, trio.current_time() - started


def _end(step: Step) -> float:
    return step.start + step.duration


async def _logged(caplog: pytest.LogCaptureFixture, text: str) -> None:
    """Until the plugin has logged ``text``."""
    with trio.fail_after(20):
        while text not in caplog.text:
            await trio.sleep(0.01)


async def test_graceful_domain_shuts_down_without_destroy(testconn: Any) -> None:
    td.start(testconn, "t-graceful")
    results, timeline, elapsed = await run(settings(shutdown_timeout=30.0), budget=60.0)
    assert results["t-graceful"].outcome == "shut down"
    assert td.state(testconn, "t-graceful") == (td.STATE_SHUTOFF, td.REASON_SHUTDOWN)
    assert elapsed < 20  # once off, not at its timeout
    [step] = timeline.steps
    assert (step.phase, step.name, step.plugin, step.outcome) == (
        "before_process_stop",
        "domain t-graceful",
        "libvirt",
        "shut down",
    )


async def test_driver_rejecting_acpi_flag_falls_back_to_plain_shutdown(
    testconn: Any, caplog: pytest.LogCaptureFixture
) -> None:
    td.start(testconn, "t-plain")
    caplog.set_level(logging.INFO)
    results, _, _ = await run(settings())
    assert results["t-plain"].outcome == "shut down"
    assert "the driver refused ACPI power button" in caplog.text
    assert "shutdown requested (driver default)" in caplog.text
    assert "libvirt error 8" in caplog.text  # logged with its code


async def test_stubborn_domain_is_destroyed_at_its_timeout(testconn: Any) -> None:
    td.start(testconn, "t-stubborn", stubborn=True)
    results, timeline, elapsed = await run(settings(shutdown_timeout=1.5, resend_interval=0.1), budget=30.0)
    result = results["t-stubborn"]
    assert result.outcome == "destroyed"
    assert td.state(testconn, "t-stubborn") == (td.STATE_SHUTOFF, td.REASON_DESTROYED)
    assert 1.5 <= elapsed < 20
    # Re-sent every 0.1 s during the 1.5 s window: more than one request
    # (about fifteen on an idle machine).
    presses = int(result.detail.split()[1])
    assert presses >= 2
    assert timeline.steps[0].outcome == "destroyed"


async def test_deadline_caps_shutdown_timeout_and_keeps_time_to_destroy(testconn: Any) -> None:
    td.start(testconn, "t-stubborn", stubborn=True)
    config = settings(shutdown_timeout=60.0, destroy_reserve=5.0)
    results, timeline, _ = await run(config, budget=4.0)
    # Destroyed, not cut: the destroy got its time before the hook's end.
    assert results["t-stubborn"].outcome == "destroyed"
    # Hooks end at 4 s less the deadline's reserve (0.4 s); a quarter of
    # that (0.9 s) is kept for the destroy, the guest gets the rest.
    (step,) = timeline.steps
    assert _end(step) >= 2.7


async def test_graceful_and_stubborn_are_handled_concurrently(testconn: Any) -> None:
    td.start(testconn, "t-a", stubborn=True)
    td.start(testconn, "t-b", stubborn=True)
    td.start(testconn, "t-c")
    results, timeline, _ = await run(settings(shutdown_timeout=1.0))
    assert {n: r.outcome for n, r in results.items()} == {
        "t-a": "destroyed",
        "t-b": "destroyed",
        "t-c": "shut down",
    }
    # One timeout, not two: every domain's step began before any ended.
    assert max(s.start for s in timeline.steps) < min(_end(s) for s in timeline.steps)


async def test_max_parallel_one_handles_domains_one_after_another(testconn: Any) -> None:
    td.start(testconn, "t-a", stubborn=True)
    td.start(testconn, "t-b", stubborn=True)
    results, timeline, elapsed = await run(settings(shutdown_timeout=0.5, max_parallel=1))
    assert [r.outcome for r in results.values()] == ["destroyed", "destroyed"]
    assert elapsed >= 1.0
    first, second = sorted(timeline.steps, key=lambda s: s.start)
    assert second.start >= _end(first)


async def test_selection_by_name_exclude_and_marker(testconn: Any) -> None:
    for name in ("t-web-1", "t-web-2", "t-db", "t-marked"):
        td.start(testconn, name)
    marker = "urn:example:provider"
    testconn.lookupByName("t-marked").setMetadata(2, "<machine/>", "p", marker, 1)
    results, _, _ = await run(settings(selection=Selection(names=("t-web-*",), exclude=("*-2",))))
    assert set(results) == {"t-web-1"}
    assert td.state(testconn, "t-web-2") == (td.STATE_RUNNING, 1)
    results, _, _ = await run(settings(selection=Selection(marker=marker)))
    assert set(results) == {"t-marked"}
    assert td.state(testconn, "t-db")[0] == td.STATE_RUNNING  # type: ignore[index]


async def test_transient_domain_that_vanishes_counts_as_shut_down(testconn: Any) -> None:
    td.start(testconn, "t-transient", persistent=False)
    results, _, _ = await run(settings())
    assert results["t-transient"].outcome == "shut down"
    assert td.state(testconn, "t-transient") is None


async def test_managedsave_saves_persistent_domains(testconn: Any) -> None:
    dom = td.start(testconn, "t-saved")
    results, timeline, _ = await run(settings(mode="managedsave"))
    assert results["t-saved"].outcome == "saved"
    assert td.state(testconn, "t-saved") == (td.STATE_SHUTOFF, td.REASON_SAVED)
    assert dom.hasManagedSaveImage(0)
    assert timeline.steps[0].outcome == "saved"


async def test_managedsave_falls_back_to_shutdown_for_transient_domains(
    testconn: Any, caplog: pytest.LogCaptureFixture
) -> None:
    td.start(testconn, "t-transient", persistent=False, stubborn=True)
    caplog.set_level(logging.INFO)
    results, _, _ = await run(settings(mode="managedsave", shutdown_timeout=0.5))
    assert results["t-transient"].outcome == "destroyed"
    assert "transient, cannot be saved" in caplog.text


async def test_overdue_shutdown_request_is_destroyed_at_once(testconn: Any) -> None:
    dom = td.start(testconn, "t-overdue", stubborn=True)
    request = ShutdownRequest(requested_at=time.time() - 120, grace=60)
    dom.setMetadata(2, request.to_xml(), KEY, NAMESPACE, 1)
    results, _, elapsed = await run(settings(shutdown_timeout=30.0), budget=60.0)
    assert results["t-overdue"].outcome == "destroyed"
    assert elapsed < 20  # at once, not after shutdown_timeout


async def test_request_grace_from_enforcer_default_bounds_the_window(testconn: Any) -> None:
    dom = td.start(testconn, "t-requested", stubborn=True)
    dom.setMetadata(2, ShutdownRequest(requested_at=time.time()).to_xml(), KEY, NAMESPACE, 1)
    config = settings(shutdown_timeout=30.0, enforcer=EnforcerSettings(grace=0.5))
    results, _, elapsed = await run(config, budget=60.0)
    assert results["t-requested"].outcome == "destroyed"
    assert 0.4 <= elapsed < 20  # at the request's grace, not after shutdown_timeout


async def test_no_domains_is_quiet_and_quick(testconn: Any) -> None:
    results, timeline, _ = await run(settings())
    assert results == {}
    assert timeline.steps == []


async def test_unreachable_libvirtd_is_reported_and_returns_in_time(
    tmp_path: Any, caplog: pytest.LogCaptureFixture
) -> None:
    uri = f"qemu:///system?socket={tmp_path}/missing-sock"
    with trio.fail_after(20):
        results, timeline, elapsed = await run(settings(uri=uri), budget=2.0)
    assert elapsed >= 1.3  # it kept trying until the graceful part was over
    assert results == {}
    [step] = timeline.steps
    assert step.outcome == "failed"
    assert "cannot list domains" in step.detail
    assert "cannot connect to" in caplog.text


async def test_lifecycle_event_ends_the_wait_without_polling(testconn: Any, caplog: pytest.LogCaptureFixture) -> None:
    # Polls every 30 s and destroys at 20 s: only libvirt's STOPPED event
    # can end the wait with "gone".
    caplog.set_level(logging.INFO)
    td.start(testconn, "t-stubborn", stubborn=True)
    config = settings(shutdown_timeout=20.0, resend_interval=30.0, poll_interval=30.0)

    async def destroyed_by_someone_else() -> None:
        await _logged(caplog, "t-stubborn: shutdown requested")
        await trio.to_thread.run_sync(testconn.lookupByName("t-stubborn").destroy)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(destroyed_by_someone_else)
        results, _, elapsed = await run(config, budget=60.0)
    # Off, but not by its own power-off: libvirt's shutoff reason says so.
    assert results["t-stubborn"].outcome == "gone"
    assert results["t-stubborn"].detail.startswith("destroyed by someone else; ")
    assert elapsed < 20


async def test_a_shortened_deadline_brings_the_destroy_forward(testconn: Any, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    td.start(testconn, "t-stubborn", stubborn=True)
    config = settings(shutdown_timeout=20.0, destroy_reserve=0.5, poll_interval=0.1)
    timeline = Timeline()
    log = logging.getLogger("supervisor.plugin.libvirt")
    deadline = Deadline(60.0)
    shortened_at = math.inf

    async def learn_the_real_deadline() -> None:
        nonlocal shortened_at
        await _logged(caplog, "t-stubborn: shutdown requested")
        shortened_at = trio.current_time()
        deadline.shorten(3.0, "pod deletion deadline")

    async with Hypervisor(config.uri, log) as hv, trio.open_nursery() as nursery:
        nursery.start_soon(learn_the_real_deadline)
        with deadline.scope():
            results = await shut_down_all(hv, config, deadline, Report(timeline, "pre_stop", "libvirt", log))
    ended = trio.current_time()
    # Destroyed within the new deadline, not cut by it, and long before the
    # 20 s shutdown_timeout: 3 s less the deadline's reserve (0.6 s) and the
    # destroy's share (0.5 s) after the shortening.
    assert results["t-stubborn"].outcome == "destroyed"
    assert 1.9 <= ended - shortened_at < 15


async def cut_when(ready: Callable[[], Awaitable[None]], config: LibvirtSettings) -> Timeline:
    """Shut down as the host runs the hook, and expire the deadline (a
    second SIGTERM) once ``ready()`` returns."""
    timeline, deadline = Timeline(), Deadline(30.0)
    log = logging.getLogger("supervisor.plugin.libvirt")

    async def second_sigterm() -> None:
        with trio.fail_after(20):
            await ready()
        deadline.expire("second SIGTERM")

    async with Hypervisor(config.uri, log) as hv, trio.open_nursery() as nursery:
        nursery.start_soon(second_sigterm)
        with deadline.scope():
            await shut_down_all(hv, config, deadline, Report(timeline, "wind_down", "libvirt", log))
    return timeline


async def cut_stubborn_once_pressed(testconn: Any, caplog: pytest.LogCaptureFixture) -> Step:
    """A stubborn guest's shutdown, cut by a second SIGTERM after its first
    press: its step."""
    caplog.set_level(logging.INFO)
    td.start(testconn, "t-stubborn", stubborn=True)
    timeline = await cut_when(
        functools.partial(_logged, caplog, "t-stubborn: shutdown requested"), settings(shutdown_timeout=20.0)
    )
    [cut] = timeline.steps
    return cut


async def test_a_second_sigterm_destroys_the_guests_still_running(
    testconn: Any, caplog: pytest.LogCaptureFixture
) -> None:
    # "Hurry", not "abandon": in the second it leaves, what still runs is destroyed.
    cut = await cut_stubborn_once_pressed(testconn, caplog)
    assert cut.outcome == "destroyed"
    assert "after the hook was cut; running; shutting down when the hook was cut" in cut.detail
    assert "still running as the shutdown ends" not in caplog.text
    assert td.state(testconn, "t-stubborn") == (td.STATE_SHUTOFF, td.REASON_DESTROYED)


async def test_a_cut_shutdown_names_the_guests_left_running(
    testconn: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def refused(uuid: str, *, graceful: bool) -> Callable[[Any], None]:
        def op(conn: Any) -> None:
            raise libvirt.libvirtError("destroy refused by the test")

        return op

    monkeypatch.setattr(_domains, "destroy", refused)
    cut = await cut_stubborn_once_pressed(testconn, caplog)
    assert cut.outcome == "cancelled"
    assert cut.detail.startswith("running; shutting down when the hook was cut, after ")
    assert "1 guest(s) still running as the shutdown ends: t-stubborn (running; last destroy failed: " in caplog.text
    assert td.state(testconn, "t-stubborn")[0] == td.STATE_RUNNING  # type: ignore[index]


async def test_a_destroy_completing_after_the_cut_is_recorded_as_destroyed(
    testconn: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    real_destroy = _domains.destroy
    destroying, release = threading.Event(), threading.Event()

    def slow_destroy(uuid: str, *, graceful: bool) -> Callable[[Any], None]:
        op = real_destroy(uuid, graceful=graceful)

        def run(conn: Any) -> None:
            op(conn)
            destroying.set()
            release.wait(30)  # the call returns late: after the hook was cut

        return run

    monkeypatch.setattr(_domains, "destroy", slow_destroy)
    td.start(testconn, "t-slow-death", stubborn=True)
    timeline = await cut_when(
        lambda: trio.to_thread.run_sync(destroying.wait, abandon_on_cancel=True), settings(shutdown_timeout=0.2)
    )
    [step] = timeline.steps
    assert step.outcome == "destroying"
    # The last destroy at the cut finds it off: nothing is reported left running.
    assert "still running as the shutdown ends" not in caplog.text
    release.set()
    with trio.fail_after(10):  # the abandoned call's thread finishes on its own
        while step.outcome != "destroyed":
            await trio.sleep(0.01)
    assert step.detail.startswith("completed ")
    assert "after the hook was cut; destroy in progress when the hook was cut" in step.detail
    assert "t-slow-death: destroyed" in caplog.text
    assert td.state(testconn, "t-slow-death") == (td.STATE_SHUTOFF, td.REASON_DESTROYED)
