"""Real QEMU guests (TCG) on a private libvirtd: what a pod that runs VMs sees.

Guests boot in a few seconds each; tests start their guests together and
wait for them in parallel to keep the suite short on two cores.
"""

from __future__ import annotations

import logging
import re
import signal
import subprocess
import time
from typing import Any

import libvirt
import pytest
import trio
from supervisor_libvirt._connection import Hypervisor
from supervisor_libvirt._domains import Selection
from supervisor_libvirt._enforcer import Enforcer
from supervisor_libvirt._metadata import KEY, NAMESPACE, ShutdownRequest
from supervisor_libvirt._settings import EnforcerSettings, LibvirtSettings
from supervisor_libvirt._shutdown import Report, Result, shut_down_all

from supervisor import Deadline, Timeline
from supervisor.cli import main
from tests.libvirt.lv_daemon import Libvirtd
from tests.libvirt.lv_enforcer import start_after_first_pass
from tests.libvirt.lv_guests import Guests

pytestmark = [pytest.mark.libvirt, pytest.mark.slow, pytest.mark.xdist_group("libvirt")]

LOG = logging.getLogger("supervisor.plugin.libvirt")
SHUTOFF = 5
REASON_SHUTDOWN, REASON_DESTROYED, REASON_DAEMON = 1, 2, 8


def settings(libvirtd: Libvirtd, *, exclude: tuple[str, ...] = (), **overrides: Any) -> LibvirtSettings:
    values: dict[str, Any] = {
        "uri": libvirtd.uri,
        "selection": Selection(names=("rt-*",), exclude=exclude),
        "shutdown_timeout": 8.0,
        "resend_interval": 2.0,
        "poll_interval": 0.5,
        "destroy_reserve": 3.0,
    }
    values.update(overrides)
    return LibvirtSettings(**values)


async def logged(caplog: pytest.LogCaptureFixture, text: str) -> None:
    """Until the plugin has logged ``text``: what a test waits on to act at
    a given point of the shutdown, instead of a guessed time."""
    with trio.fail_after(60):
        while text not in caplog.text:
            await trio.sleep(0.02)


def overlap(timeline: Timeline) -> bool:
    """Whether every step began before any ended: they ran side by side."""
    return max(s.start for s in timeline.steps) < min(s.start + s.duration for s in timeline.steps)


async def shut_down(
    config: LibvirtSettings, budget: float = 30.0, timeline: Timeline | None = None
) -> tuple[dict[str, Result], float]:
    if timeline is None:
        timeline = Timeline()
    started = trio.current_time()
    async with Hypervisor(config.uri, LOG) as hv:
        results = await shut_down_all(
            hv, config, Deadline(budget), Report(timeline, "before_process_stop", "libvirt", LOG)
        )
    return results, trio.current_time() - started


def presses(result: Result) -> int:
    return int(result.detail.split()[0]) if result.detail[0].isdigit() else int(result.detail.split()[1])


async def test_graceful_guests_shut_down_and_the_stubborn_one_is_destroyed_at_its_deadline(
    guests: Guests, libvirtd: Libvirtd, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    for name, flavour in (
        ("rt-graceful", "graceful"),
        ("rt-slow", "slow"),
        ("rt-stubborn", "stubborn"),
        ("rt-victim", "stubborn"),
    ):
        guests.start(name, flavour, persistent=True)
    guests.wait_ready("rt-graceful", "rt-slow", "rt-stubborn", "rt-victim")

    async def destroyed_by_someone_else() -> None:
        await logged(caplog, "rt-victim: shutdown requested")
        await trio.to_thread.run_sync(guests.conn.lookupByName("rt-victim").destroy)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(destroyed_by_someone_else)
        results, elapsed = await shut_down(settings(libvirtd, shutdown_timeout=8.0, resend_interval=5.0))
    # Off, but not by the guest's own power-off: libvirt's shutoff reason says so.
    assert results["rt-victim"].outcome == "gone"
    assert results["rt-victim"].detail.startswith("destroyed by someone else; ")

    assert results["rt-graceful"].outcome == "shut down"
    assert results["rt-slow"].outcome == "shut down"
    assert guests.state("rt-graceful") == (SHUTOFF, REASON_SHUTDOWN)
    assert guests.state("rt-slow") == (SHUTOFF, REASON_SHUTDOWN)
    assert "guest: powering off" in guests.output("rt-slow")

    assert results["rt-stubborn"].outcome == "destroyed"
    assert guests.state("rt-stubborn") == (SHUTOFF, REASON_DESTROYED)
    assert presses(results["rt-stubborn"]) >= 2  # re-sent at 5 s
    # Destroyed at its 8 s timeout (QEMU takes a moment to exit), not at the
    # 30 s budget's end.
    assert 8.0 <= elapsed < 25.0


async def test_press_during_boot_is_lost_and_the_resend_stops_the_guest(guests: Guests, libvirtd: Libvirtd) -> None:
    guests.start("rt-booting", "graceful")
    assert "guest: ready" not in guests.output("rt-booting")  # still booting: the press goes nowhere
    # A TCG boot on a machine whose every core is busy has taken over 26 s:
    # the budget only bounds a guest that never boots.
    config = settings(libvirtd, shutdown_timeout=100.0, resend_interval=1.5)
    results, _ = await shut_down(config, budget=120.0)
    result = results["rt-booting"]
    assert result.outcome == "shut down"
    assert presses(result) >= 2
    console = guests.output("rt-booting")
    assert console.count("guest: power button pressed") == 1  # only a press after boot arrived
    assert guests.state("rt-booting") is None  # transient: gone once off


async def test_guests_in_parallel_take_about_as_long_as_one(guests: Guests, libvirtd: Libvirtd) -> None:
    names = [f"rt-par-{i}" for i in range(3)]
    for name in names:
        guests.start(name, "slow")
    guests.wait_ready(*names)
    # Polls every 10 s: the lifecycle events end the waits.
    config = settings(libvirtd, shutdown_timeout=30.0, resend_interval=10.0, poll_interval=10.0)
    timeline = Timeline()
    results, elapsed = await shut_down(config, budget=60.0, timeline=timeline)
    assert {r.outcome for r in results.values()} == {"shut down"}
    # Each takes 3 s after its press, all at once: side by side in the timeline.
    assert elapsed >= 3.0
    assert overlap(timeline), timeline.steps


async def test_managedsave_produces_a_saved_image(guests: Guests, libvirtd: Libvirtd) -> None:
    dom = guests.start("rt-saved", "stubborn", persistent=True)
    guests.wait_ready("rt-saved")
    results, _ = await shut_down(settings(libvirtd, mode="managedsave"))
    assert results["rt-saved"].outcome == "saved"
    assert dom.hasManagedSaveImage(0)
    assert (libvirtd.save_dir / "rt-saved.save").stat().st_size > 1_000_000
    assert guests.state("rt-saved") == (SHUTOFF, 5)  # reason: saved


async def test_enforcer_destroys_at_the_due_time_and_only_within_its_selection(
    guests: Guests, libvirtd: Libvirtd, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    stubborn = guests.start("rt-enf-stubborn", "stubborn")
    graceful = guests.start("rt-enf-graceful", "graceful")
    excluded = guests.start("rt-enf-x1", "stubborn")
    defined = guests.start("rt-enf-defined", "stubborn", persistent=True)
    defined.destroy()
    # A request on a shut-off domain would land in its persistent definition: refused.
    assert main(["libvirt", "request-shutdown", "rt-enf-defined", "-c", libvirtd.uri]) == 1
    assert "rt-enf-defined: not running" in capsys.readouterr().err
    with pytest.raises(libvirt.libvirtError):
        defined.metadata(2, NAMESPACE, 2)
    # Something else writes one there anyway: every start copies it into the
    # live definition, where it counts.
    overdue = ShutdownRequest(requested_at=time.time() - 60, grace=1.0).to_xml()
    defined.setMetadata(2, overdue, KEY, NAMESPACE, 2)
    defined.create()
    guests.wait_ready("rt-enf-stubborn", "rt-enf-graceful", "rt-enf-x1", "rt-enf-defined")
    excluded.setMetadata(2, overdue, KEY, NAMESPACE, 1)
    due = time.time() + 3.0
    for dom in (stubborn, graceful):
        dom.setMetadata(2, ShutdownRequest(requested_at=due - 3.0, grace=3.0).to_xml(), KEY, NAMESPACE, 1)
    # One pass at the start, the next 60 s later: only the timer can be on time.
    config = settings(libvirtd, exclude=("rt-enf-x*",), enforcer=EnforcerSettings(resync_interval=60.0))
    async with Hypervisor(config.uri, LOG) as hv:
        enforcer = Enforcer(hv, config, LOG)
        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(enforcer.run)
                while "rt-enf-stubborn" not in enforcer.destroyed:
                    await trio.sleep(0.05)
                nursery.cancel_scope.cancel()
    destroyed_at = time.time()
    assert enforcer.destroyed == ["rt-enf-defined", "rt-enf-stubborn"]  # the overdue one at once
    # Long before the next pass (60 s); the lag itself is measured in benchmarks/.
    assert due <= destroyed_at < due + 20.0, enforcer.lag
    assert guests.state("rt-enf-stubborn") is None  # transient: destroyed means gone
    assert guests.state("rt-enf-graceful") is None
    assert "guest: powering off" in guests.output("rt-enf-graceful")
    assert guests.state("rt-enf-defined") == (SHUTOFF, REASON_DESTROYED)
    # Left alone, and said so: the excluded guest.
    assert guests.state("rt-enf-x1") == (1, 1)
    assert "rt-enf-x1: shutdown request not acted on: the plugin's selection leaves" in caplog.text


async def test_libvirtd_down_mid_shutdown_is_reported_and_the_plan_finishes_in_time(
    guests: Guests, libvirtd: Libvirtd, caplog: pytest.LogCaptureFixture
) -> None:
    guests.start("rt-orphan", "stubborn")
    guests.wait_ready("rt-orphan")

    caplog.set_level(logging.INFO)

    async def kill_daemon() -> None:
        await logged(caplog, "rt-orphan: shutdown requested")
        await trio.to_thread.run_sync(libvirtd.stop, signal.SIGKILL)

    budget = 6.0
    async with trio.open_nursery() as nursery:
        nursery.start_soon(kill_daemon)
        with trio.fail_after(budget):
            results, elapsed = await shut_down(settings(libvirtd, shutdown_timeout=30.0), budget=budget)
    assert "lost the connection to" in caplog.text
    assert results["rt-orphan"].outcome == "failed"
    assert elapsed < budget
    libvirtd.start()  # QEMU kept running without its daemon; the restarted one finds it again
    guests.reconnect(libvirtd.uri)
    assert guests.state("rt-orphan") == (1, 1)  # running, booted


async def test_libvirtd_restarted_mid_shutdown_is_reconnected(
    guests: Guests, libvirtd: Libvirtd, caplog: pytest.LogCaptureFixture
) -> None:
    guests.start("rt-restart-slow", "slow")
    guests.start("rt-restart-stubborn", "stubborn")
    guests.wait_ready("rt-restart-slow", "rt-restart-stubborn")

    caplog.set_level(logging.INFO)

    async def restart_daemon() -> None:
        await logged(caplog, "rt-restart-stubborn: shutdown requested")
        await trio.to_thread.run_sync(libvirtd.stop)
        # Back once the plugin has noticed that it was gone.
        await logged(caplog, "lost the connection to")
        await trio.to_thread.run_sync(libvirtd.start)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(restart_daemon)
        results, elapsed = await shut_down(settings(libvirtd, shutdown_timeout=10.0), budget=25.0)
    assert "lost the connection to" in caplog.text
    # The loss is the warning; the reconnect is news.
    assert {r.levelname for r in caplog.records if r.getMessage().startswith("reconnected to")} == {"INFO"}
    assert results["rt-restart-slow"].outcome == "shut down"
    assert results["rt-restart-stubborn"].outcome == "destroyed"
    assert elapsed < 25.0


async def test_libvirtd_down_across_the_destroy_is_retried_and_the_guest_goes_once_it_is_back(
    guests: Guests, libvirtd: Libvirtd, caplog: pytest.LogCaptureFixture
) -> None:
    guests.start("rt-retry", "stubborn", persistent=True)
    guests.wait_ready("rt-retry")
    caplog.set_level(logging.INFO)

    async def down_across_the_destroy() -> None:
        await logged(caplog, "rt-retry: shutdown requested")
        await trio.to_thread.run_sync(libvirtd.stop)
        await logged(caplog, "rt-retry: destroy failed")
        await trio.to_thread.run_sync(libvirtd.start)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(down_across_the_destroy)
        # One press, done before libvirtd stops: a libvirtd stopped in the
        # middle of a call may kill the guest itself as it comes back.
        config = settings(libvirtd, shutdown_timeout=3.0, resend_interval=60.0)
        results, elapsed = await shut_down(config, budget=40.0)
    # The destroy tried again once libvirtd answered.  A destroy that comes
    # while the restarted libvirtd is still reconnecting to the QEMU makes
    # libvirtd finish the guest off itself, with its own reason.
    result = results["rt-retry"]
    assert result.outcome == "destroyed" or result.detail.startswith("killed by libvirtd as it reconnected"), results
    assert "rt-retry: destroy failed" in caplog.text
    assert "still running as the shutdown ends" not in caplog.text
    guests.reconnect(libvirtd.uri)
    assert guests.state("rt-retry") in ((SHUTOFF, REASON_DESTROYED), (SHUTOFF, REASON_DAEMON))
    assert elapsed < 40.0


def virsh_metadata(libvirtd: Libvirtd, name: str, request: ShutdownRequest, *where: str) -> None:
    """Write a request as a provider would, with virsh."""
    subprocess.run(
        [
            "virsh",
            "-q",
            "-c",
            libvirtd.uri,
            "metadata",
            name,
            NAMESPACE,
            "--key",
            KEY,
            *where,
            "--set",
            request.to_xml(),
        ],
        check=True,
        capture_output=True,
        timeout=30,
    )


async def test_requests_written_while_the_enforcer_runs_are_destroyed_within_a_second_of_due(
    guests: Guests, libvirtd: Libvirtd, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    for name in ("rt-due-later", "rt-overdue", "rt-config-only"):
        guests.start(name, "stubborn", persistent=True)
    guests.wait_ready("rt-due-later", "rt-overdue", "rt-config-only")
    # One pass at the start, the next 60 s later: only the metadata-change
    # events can make the requests known in time.
    config = settings(libvirtd, enforcer=EnforcerSettings(resync_interval=60.0))
    async with Hypervisor(config.uri, LOG) as hv:
        enforcer = Enforcer(hv, config, LOG)
        with trio.fail_after(40):
            async with trio.open_nursery() as nursery:
                await start_after_first_pass(nursery, enforcer)  # the next pass is 60 s away
                # Both definitions, as many providers write it; due in 5 s.
                later = ShutdownRequest(requested_at=time.time(), grace=5.0)
                await trio.to_thread.run_sync(virsh_metadata, libvirtd, "rt-due-later", later, "--live", "--config")
                # Written already overdue: due when written.
                overdue = ShutdownRequest(requested_at=time.time() - 30, grace=5.0)
                overdue_written = time.time()
                await trio.to_thread.run_sync(virsh_metadata, libvirtd, "rt-overdue", overdue, "--live")
                # The persistent definition only: asks nothing of this boot.
                await trio.to_thread.run_sync(virsh_metadata, libvirtd, "rt-config-only", overdue, "--config")
                while len(enforcer.destroyed) < 2:
                    await trio.sleep(0.05)
                nursery.cancel_scope.cancel()
    lags = dict(zip(enforcer.destroyed, zip(enforcer.lag, enforcer.destroy_took, strict=True), strict=True))
    assert sorted(lags) == ["rt-due-later", "rt-overdue"]
    # Within 1 s of due, plus libvirt's own destroy time.
    lag, took = lags["rt-due-later"]
    assert 0.0 <= lag - took < 1.0, lags
    lag, took = lags["rt-overdue"]
    assert lag - took < (overdue_written - overdue.due(0.0)) + 1.0, lags  # type: ignore[operator]
    assert guests.state("rt-due-later") == (SHUTOFF, REASON_DESTROYED)
    assert guests.state("rt-overdue") == (SHUTOFF, REASON_DESTROYED)
    assert guests.state("rt-config-only") == (1, 1)  # running
    assert caplog.text.count("rt-config-only: ignoring the shutdown request in its persistent definition only") == 1
    # The destroy's line tells the discovery's lateness (written 25 s after
    # its due time) and libvirt's time apart.
    assert re.search(r"rt-overdue: destroyed, [\d.]+s after its due time \(request found 2\d\.\d\ds after", caplog.text)
    assert re.search(r"rt-due-later: destroyed, .*\(request found before its due time; destroy took ", caplog.text)


async def test_a_guest_that_reboots_instead_of_powering_off_is_named_so(
    guests: Guests, libvirtd: Libvirtd, caplog: pytest.LogCaptureFixture
) -> None:
    dom = guests.start("rt-reboots", "stubborn", on_reboot="restart")
    guests.wait_ready("rt-reboots")
    caplog.set_level(logging.INFO)

    async def reboot_at_the_press() -> None:
        await logged(caplog, "rt-reboots: shutdown requested")
        await trio.to_thread.run_sync(dom.reset, 0)  # a reset: libvirt's REBOOT event, as for a guest's reboot

    async with trio.open_nursery() as nursery:
        nursery.start_soon(reboot_at_the_press)
        results, _ = await shut_down(settings(libvirtd, shutdown_timeout=5.0, resend_interval=1.5))
    assert results["rt-reboots"].outcome == "destroyed"
    # QEMU's reset may reach libvirt as more than one REBOOT event: counted as such.
    assert re.search(r"rt-reboots: rebooted instead of powering off \(\d time\(s\)\); shutdown request 2", caplog.text)
    assert re.search(r"rt-reboots: still running after .* having rebooted \d time\(s\); destroying it", caplog.text)
    assert "rt-reboots: destroyed after " in caplog.text  # its own line, not only the timeline's
