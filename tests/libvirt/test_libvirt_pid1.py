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
from pathlib import Path
from typing import Any

import libvirt
import pytest

from tests.libvirt.lv_daemon import Libvirtd, kill_qemu_under
from tests.libvirt.lv_guestimage import GuestImage
from tests.libvirt.lv_guests import Guests
from tests.pid1 import SUPERVISOR, Supervisor

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


def test_supervisor_shuts_guests_down_before_it_stops_libvirtd(tmp_path: Path, guest_image: GuestImage) -> None:
    daemon = Libvirtd()
    config = tmp_path / "pod.yaml"
    config.write_text(json.dumps(pod_config(daemon)))  # JSON is YAML
    guests: Guests | None = None
    try:
        with Supervisor(["-c", str(config)], user_namespace=False) as sup:
            daemon.wait_until_up(30)
            guests = Guests(libvirt.open(daemon.uri), guest_image, daemon.base / "console")
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
    finally:
        if guests is not None:
            with contextlib.suppress(libvirt.libvirtError):
                guests.conn.close()
        kill_qemu_under(daemon.base)
        daemon.cleanup()


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
