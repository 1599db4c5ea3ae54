"""End to end: ``supervisor`` as PID 1 supervising libvirtd, guests running.

On SIGTERM the plugin shuts the guests down in libvirtd's
before_process_stop, before libvirtd gets its own SIGTERM (which would leave
QEMU running), and the timeline shows one step per guest.
"""

from __future__ import annotations

import contextlib
import json
import re
import signal
from pathlib import Path
from typing import Any

import libvirt
import pytest

from tests.libvirt.lv_daemon import Libvirtd, kill_qemu_under
from tests.libvirt.lv_guestimage import GuestImage
from tests.libvirt.lv_guests import Guests
from tests.pid1 import Supervisor

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
                "enforcer": False,
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
            guests.wait_ready("pid1-graceful", "pid1-stubborn")
            sup.signal(signal.SIGTERM)
            code = sup.wait(45)
        output = sup.output
        assert code == 128 + signal.SIGTERM, output  # the main process's status
        assert re.search(r"before_process_stop\s+libvirt: domain pid1-graceful\s+shut down", output), output
        assert re.search(r"before_process_stop\s+libvirt: domain pid1-stubborn\s+destroyed", output), output
        # The guests went before libvirtd was stopped: their steps start earlier.
        lines = output.splitlines()
        guest_steps = [i for i, line in enumerate(lines) if "libvirt: domain pid1-" in line]
        libvirtd_stop = [i for i, line in enumerate(lines) if re.search(r"\bstop\s+libvirtd\b", line)]
        assert guest_steps and libvirtd_stop and max(guest_steps) < min(libvirtd_stop), output
        assert "guest: powering off" in guests.output("pid1-graceful")
    finally:
        if guests is not None:
            with contextlib.suppress(libvirt.libvirtError):
                guests.conn.close()
        kill_qemu_under(daemon.base)
        daemon.cleanup()
