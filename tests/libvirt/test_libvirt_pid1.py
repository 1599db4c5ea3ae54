"""End to end: ``supervisor`` as PID 1 supervising libvirtd, guests running.

While it runs, an operator's ``supervisor libvirt request-shutdown`` is
enforced: the stubborn guest is destroyed once its grace has passed.  On
SIGTERM the plugin shuts the selected guests down in libvirtd's
before_process_stop, before libvirtd gets its own SIGTERM (which would leave
QEMU running), and the timeline shows one step per guest; the QEMU of a guest
the plugin leaves alone outlives libvirtd and is swept by the PID-1 layer.
"""

from __future__ import annotations

import contextlib
import json
import re
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import libvirt
import pytest

from tests.libvirt.lv_daemon import Libvirtd, kill_qemu_under
from tests.libvirt.lv_guestimage import GuestImage
from tests.libvirt.lv_guests import Guests
from tests.pid1 import SUPERVISOR, Supervisor, wait_until

pytestmark = [pytest.mark.libvirt, pytest.mark.slow, pytest.mark.xdist_group("libvirt")]


def pod_config(daemon: Libvirtd) -> dict[str, Any]:
    return {
        "grace_period": "30s",
        "processes": [
            {
                "name": "libvirtd",
                "command": daemon.command(),
                "ready": {"socket": str(daemon.socket), "timeout": "30s"},
            },
            {
                "name": "provider",
                "command": ["sleep", "infinity"],
                "depends_on": ["libvirtd"],
                "main": True,
            },
        ],
        "plugins": {
            "libvirt": {
                "process": "libvirtd",
                "uri": daemon.uri,
                "domains": ["pid1-*"],
                "shutdown_timeout": "6s",
                "resend_interval": "2s",
                "enforcer": {"resync_interval": "500ms", "grace": "1m"},
            }
        },
    }


@dataclass
class OwnLibvirtd:
    """A libvirtd of the test's own, supervised by the pod under test."""

    daemon: Libvirtd
    image: GuestImage
    guests: Guests | None = None

    def connect(self) -> Guests:
        """Once the pod's libvirtd answers: a guest factory on it."""
        self.daemon.wait_until_up(30)
        self.guests = Guests(libvirt.open(self.daemon.uri), self.image, self.daemon.base / "console")
        return self.guests


@contextlib.contextmanager
def own_libvirtd(image: GuestImage) -> Iterator[OwnLibvirtd]:
    own = OwnLibvirtd(Libvirtd(), image)
    try:
        yield own
    finally:
        if own.guests is not None:
            with contextlib.suppress(libvirt.libvirtError):
                own.guests.conn.close()
        kill_qemu_under(own.daemon.base)
        own.daemon.cleanup()


def test_supervisor_shuts_guests_down_before_it_stops_libvirtd(tmp_path: Path, guest_image: GuestImage) -> None:
    with own_libvirtd(guest_image) as own:
        daemon = own.daemon
        config = tmp_path / "pod.yaml"
        config.write_text(json.dumps(pod_config(daemon)))  # JSON is YAML
        with Supervisor(["-c", str(config)], user_namespace=False) as sup:
            guests = own.connect()
            guests.start("pid1-graceful", "graceful")
            guests.start("pid1-stubborn", "stubborn")
            guests.start("pid1-requested", "stubborn")
            guests.start("left-behind", "stubborn")  # not selected by the plugin
            guests.wait_ready("pid1-graceful", "pid1-stubborn", "pid1-requested", "left-behind")

            request = [SUPERVISOR, "libvirt", "request-shutdown", "pid1-requested"]
            operator = subprocess.run(
                [*request, "--uri", daemon.uri, "--grace", "2s"],
                capture_output=True,
                text=True,
                timeout=30,
                check=False,
            )
            assert operator.returncode == 0, operator.stderr
            assert operator.stdout.startswith("pid1-requested: shutdown requested at ")
            sup.wait_for(r"enforcer: pid1-requested: destroyed", timeout=20)
            assert guests.state("pid1-requested") is None

            sup.signal(signal.SIGTERM)
            code = sup.wait(45)
        output = sup.output
        assert code == 128 + signal.SIGTERM, output  # the main process's status
        step = r"before_process_stop\s+libvirt: domain"
        assert re.search(rf"{step} pid1-graceful\s+shut down", output), output
        assert re.search(rf"{step} pid1-stubborn\s+destroyed", output), output
        assert not re.search(rf"{step} (pid1-requested|left-behind)", output), output
        # The guests went before libvirtd was stopped: their steps start earlier.
        lines = output.splitlines()
        guest_steps = [i for i, line in enumerate(lines) if "libvirt: domain pid1-" in line]
        libvirtd_stop = [i for i, line in enumerate(lines) if re.search(r"\bstop\s+libvirtd\b", line)]
        assert guest_steps and libvirtd_stop and max(guest_steps) < min(libvirtd_stop), output
        # The unselected guest's QEMU outlived libvirtd: the PID-1 layer swept it.
        assert re.search(r"sweeping 1 leftover process", output), output
        assert "guest: powering off" in guests.output("pid1-graceful")


@pytest.mark.parametrize("trigger", ["SIGTERM, then the main process exits", "the main process exits by itself"])
def test_without_a_supervised_libvirtd_guests_go_although_the_main_process_exits(
    trigger: str, tmp_path: Path, guests: Guests, libvirtd: Libvirtd
) -> None:
    # libvirtd runs outside the pod (the session's daemon): the plugin shuts
    # the guests down in wind_down, which the main process's exit neither
    # cancels (pre_stop would be) nor skips.
    release = tmp_path / "release"
    main = f"trap '' TERM; echo up; while [ ! -e {release} ]; do sleep 0.05; done; exit 0"
    config = tmp_path / "pod.yaml"
    section = {"uri": libvirtd.uri, "domains": ["wd-*"], "shutdown_timeout": "4s", "enforcer": False}
    pod = {"grace_period": "40s", "processes": [{"name": "main", "command": ["sh", "-c", main], "main": True}]}
    config.write_text(json.dumps({**pod, "plugins": {"libvirt": section}}))
    guests.start("wd-graceful", "graceful", persistent=True)
    guests.start("wd-stubborn", "stubborn", persistent=True)
    guests.wait_ready("wd-graceful", "wd-stubborn")
    with Supervisor(["-c", str(config)], user_namespace=False) as sup:
        sup.wait_for("^up$", stream="stdout", timeout=30)
        if trigger.startswith("SIGTERM"):
            sup.signal(signal.SIGTERM)
            sup.wait_for("shutting down: received SIGTERM")
        release.touch()
        code = sup.wait(60)
    output = sup.output
    assert code == 0, output
    assert re.search(r"wind_down\s+libvirt: domain wd-graceful\s+shut down", output), output
    assert re.search(r"wind_down\s+libvirt: domain wd-stubborn\s+destroyed", output), output
    assert guests.state("wd-graceful") == (5, 1)  # shut off: shutdown
    assert guests.state("wd-stubborn") == (5, 2)  # shut off: destroyed


def wind_down_pod(tmp_path: Path, libvirtd: Libvirtd, grace: str, **section: object) -> Path:
    """A pod whose libvirtd runs outside it (the session's daemon): the
    plugin shuts the guests down in wind_down; the main process says "up"."""
    config = tmp_path / "pod.yaml"
    libvirt_section = {"uri": libvirtd.uri, "domains": ["st-*"], "enforcer": False, **section}
    pod = {
        "grace_period": grace,
        "processes": [{"name": "main", "command": ["sh", "-c", "echo up; exec sleep 1000"], "main": True}],
        "plugins": {"libvirt": libvirt_section},
    }
    config.write_text(json.dumps(pod))
    return config


def wall_lines(sup: Supervisor) -> list[str]:
    """PID 1's line when it had to kill everything at the wall itself."""
    return [line for line in sup.stderr_lines if "over: SIGKILL to" in line]


@pytest.mark.parametrize("run", range(10))
def test_a_short_grace_period_ends_by_the_supervisors_own_escalation_never_the_wall(
    run: int, tmp_path: Path, guests: Guests, libvirtd: Libvirtd
) -> None:
    # Two guests that ignore the power button, a 5 s grace period: their
    # destroys fit the hook, and closing the connection never waits past it.
    names = [f"st-{run}-a", f"st-{run}-b"]
    for name in names:
        guests.start(name, "stubborn", persistent=True)
    guests.wait_ready(*names)
    config = wind_down_pod(tmp_path, libvirtd, "5s", resend_interval="2s")
    with Supervisor(["-c", str(config)], user_namespace=False) as sup:
        sup.wait_for("^up$", stream="stdout", timeout=30)
        sup.signal(signal.SIGTERM)
        code = sup.wait(30)
    output = sup.output
    assert not wall_lines(sup), output
    # The main process got its stop signal from the orchestrator, before its
    # escalation: its own status, not 137.
    assert code == 128 + signal.SIGTERM, output
    assert_destroyed(guests, names, output)


def assert_destroyed(guests: Guests, names: list[str], output: str) -> None:
    """Each guest's step says destroyed -- or destroying: libvirt confirms a
    destroy once QEMU has exited and it has cleaned up, which on a loaded
    machine can take longer than the hook had left -- and each ends up off."""
    for name in names:
        assert re.search(rf"wind_down\s+libvirt: domain {name}\s+destroy(ed|ing)", output), output
    wait_until(lambda: all(guests.state(name) == (5, 2) for name in names), timeout=20)  # shut off: destroyed


def test_a_second_sigterm_destroys_every_running_guest_in_the_second_it_leaves(
    tmp_path: Path, guests: Guests, libvirtd: Libvirtd
) -> None:
    names = ["st-hurry-1", "st-hurry-2", "st-hurry-3"]
    for name in names:
        guests.start(name, "stubborn", persistent=True)
    guests.wait_ready(*names)
    config = wind_down_pod(tmp_path, libvirtd, "30s", shutdown_timeout="20s", resend_interval="5s")
    with Supervisor(["-c", str(config)], user_namespace=False) as sup:
        sup.wait_for("^up$", stream="stdout", timeout=30)
        sup.signal(signal.SIGTERM)
        for name in names:
            sup.wait_for(rf"{name}: shutdown requested", timeout=30)
        sup.signal(signal.SIGTERM)
        code = sup.wait(30)
    output = sup.output
    # "Hurry", not "abandon": the guests go in the slice, and the supervisor
    # itself escalates and logs its timeline before the wall.
    assert not wall_lines(sup), output
    assert code == 128 + signal.SIGKILL, output  # the main process, killed by the escalation
    assert "still running as the shutdown ends" not in output, output
    assert_destroyed(guests, names, output)


def test_guests_saved_at_shutdown_are_restored_at_the_next_start_and_only_those(
    tmp_path: Path, guests: Guests, libvirtd: Libvirtd
) -> None:
    names = ["st-saved-1", "st-saved-2", "st-saved-3"]
    for name in [*names, "st-theirs"]:
        guests.start(name, "stubborn", persistent=True)
    guests.wait_ready(*names, "st-theirs")
    guests.conn.lookupByName("st-theirs").managedSave(0)  # saved, but not by the plugin
    config = wind_down_pod(
        tmp_path, libvirtd, "60s", mode="managedsave", bypass_cache=True, sync_time=True, shutdown_timeout="40s"
    )
    with Supervisor(["-c", str(config)], user_namespace=False) as sup:
        sup.wait_for("^up$", stream="stdout", timeout=30)
        sup.signal(signal.SIGTERM)
        assert sup.wait(60) == 128 + signal.SIGTERM, sup.output
    for name in names:
        assert re.search(rf"wind_down\s+libvirt: domain {name}\s+saved", sup.output), sup.output
        assert guests.state(name) == (5, 5)  # shut off: saved
    # The pod starts again: the guests the plugin saved run again before the
    # main process starts.
    with Supervisor(["-c", str(config)], user_namespace=False) as sup:
        sup.wait_for("^up$", stream="stdout", timeout=60)
        states = {name: guests.state(name) for name in [*names, "st-theirs"]}
        sup.signal(signal.SIGTERM)
        sup.wait(60)
    output = sup.output
    assert states == {**{name: (1, 3) for name in names}, "st-theirs": (5, 5)}, output  # running: restored
    assert "restoring 3 guest(s) this plugin saved" in output, output
    lines = output.splitlines()
    restored = [i for i, line in enumerate(lines) if re.search(r"st-saved-\d: restored in ", line)]
    main_started = [i for i, line in enumerate(lines) if "started main" in line]
    assert len(restored) == 3 and main_started and max(restored) < min(main_started), output
    # sync_time asks the guest agent, which the test guest does not run: said once per guest.
    assert output.count("cannot set its clock after the restore") == 3, output


def test_with_a_supervised_libvirtd_saved_guests_are_restored_once_it_answers(
    tmp_path: Path, guest_image: GuestImage
) -> None:
    with own_libvirtd(guest_image) as own:
        config = tmp_path / "pod.yaml"
        pod = pod_config(own.daemon)
        pod["plugins"]["libvirt"].update(mode="managedsave", enforcer=False)
        config.write_text(json.dumps(pod))
        names = ["pid1-saved-1", "pid1-saved-2"]
        with Supervisor(["-c", str(config)], user_namespace=False) as sup:
            guests = own.connect()
            for name in names:
                guests.start(name, "stubborn", persistent=True)
            guests.wait_ready(*names)
            sup.signal(signal.SIGTERM)
            assert sup.wait(60) == 128 + signal.SIGTERM, sup.output
        for name in names:
            assert re.search(rf"before_process_stop\s+libvirt: domain {name}\s+saved", sup.output), sup.output
        guests.conn.close()
        # The pod starts again: libvirtd first, then the plugin brings the guests back.
        with Supervisor(["-c", str(config)], user_namespace=False) as sup:
            sup.wait_for(r"restoring 2 guest\(s\) this plugin saved", timeout=60)
            sup.wait_for(r"pid1-saved-\d: restored in ", count=2, timeout=60)
            guests.conn = libvirt.open(own.daemon.uri)
            assert {name: guests.state(name) for name in names} == {name: (1, 3) for name in names}  # restored
            sup.signal(signal.SIGTERM)
            sup.wait(60)
        assert "cannot connect to" not in sup.output, sup.output  # waiting for the spawned daemon is quiet
