"""A plugin contributes a status line and a health check through its Context
(ctx.set_status, ctx.report_health): status, health and /readyz show them."""

from __future__ import annotations

import signal
import textwrap
from pathlib import Path

from tests.control._ctl import ctl, wait_status, write_config
from tests.pid1 import Supervisor

PLUGIN = """
    import trio
    from supervisor import hookimpl

    @hookimpl
    async def supervisor_background(ctx):
        ctx.set_status("guests: 2 running, 1 shutting down")
        ctx.report_health("guests", ok=False, level="ready", detail="1 guest shutting down")
        await trio.sleep_forever()
"""


def _site(tmp_path: Path) -> Path:
    site = tmp_path / "site"
    site.mkdir()
    (site / "testplugin_guests.py").write_text(textwrap.dedent(PLUGIN))
    dist = site / "supervisor_testguests-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: supervisor-testguests\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[supervisor.plugins]\nguests = testplugin_guests\n")
    return site


def test_a_plugin_reports_a_status_line_and_a_check(tmp_path: Path) -> None:
    config = write_config(
        tmp_path,
        """
        plugins:
          guests: {}
        processes:
          - name: app
            main: true
            command: ["sleep", "60"]
        """,
    )
    env = {"PYTHONPATH": str(_site(tmp_path)), "SUPERVISOR_ALLOW_PYTHONPATH": "1"}
    with Supervisor(["-c", config], env=env) as sup:
        answer = wait_status(sup, lambda a: bool(a["plugins"]))
        assert answer["plugins"] == {"guests": "guests: 2 running, 1 shutting down"}
        (check,) = answer["checks"]
        assert (check["name"], check["source"], check["level"], check["up"]) == (
            "guests.guests",
            "guests",
            "ready",
            False,
        )
        assert answer["alive"] and not answer["ready"]
        text = ctl(sup, "status").stdout
        assert "guests: guests: 2 running, 1 shutting down" in text
        assert "check guests.guests (ready): down (1x: 1 guest shutting down)" in text
        result = ctl(sup, "health")
        assert (result.returncode, result.stdout) == (
            1,
            "ready: failing: check guests.guests: failed: 1 guest shutting down\n",
        )
        assert ctl(sup, "health", "--level", "alive").returncode == 0
        sup.signal(signal.SIGTERM)
        assert sup.wait() == 143
