"""PYTHONPATH cannot make the supervisor import code (issue: an app that
can write to a directory on the image's PYTHONPATH put a ``json.py`` there,
and root's ``supervisor health`` exec probe imported it; a ``.dist-info``
there replaced the sleep plugin)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from tests.control._ctl import wait_status, write_config
from tests.pid1 import SUPERVISOR, Supervisor


def _planted(tmp_path: Path) -> tuple[Path, Path]:
    """A directory as the app would leave it: a ``json.py`` and a plugin
    distribution that claims the name ``sleep``; each marks a file when
    imported.  Returns the directory and the marker."""
    app = tmp_path / "app"
    app.mkdir()
    marker = tmp_path / "imported"
    mark = f"open({str(marker)!r}, 'a').write(__name__ + '\\n')\n"
    (app / "json.py").write_text(mark + "from _json import *\n")
    (app / "evilmod.py").write_text(mark)
    dist = app / "evilpkg-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: evilpkg\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[supervisor.plugins]\nsleep = evilmod\n")
    return app, marker


def _cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [SUPERVISOR, *args], capture_output=True, text=True, env={**os.environ, **env}, timeout=30, check=False
    )


def test_pythonpath_reaches_neither_pid1_nor_the_cli_but_the_children_keep_it(tmp_path: Path) -> None:
    app, marker = _planted(tmp_path)
    seen = tmp_path / "child-pythonpath"
    config = write_config(
        tmp_path,
        f"""
        plugins:
          sleep: {{seconds: 0s}}
        processes:
          - name: app
            main: true
            command: [sh, -c, 'echo "$PYTHONPATH" > {seen}.tmp; mv {seen}.tmp {seen}; exec sleep 120']
        """,
    )
    env = {"PYTHONPATH": str(app)}
    with Supervisor(["-c", config], env=env) as sup:
        wait_status(sup, lambda a: seen.exists())
        assert seen.read_text() == f"{app}\n"  # the environment is the app's, as configured
        probe = _cli("health", env={**env, "SUPERVISOR_SOCKET": sup.socket})
        assert (probe.returncode, probe.stdout) == (0, "ready: ok\n"), probe
        sup.signal(signal.SIGTERM)
        assert sup.wait() == 143
    listed = _cli("plugins", env=env)
    assert listed.returncode == 0, listed
    assert "sleep  (pid1-supervisor-sleep " in listed.stdout and "evilpkg" not in listed.stdout, listed.stdout
    checked = _cli("check", "-c", config, env=env)
    assert checked.returncode == 0, checked
    assert not marker.exists(), marker.read_text()


def test_the_image_may_allow_pythonpath_explicitly(tmp_path: Path) -> None:
    app, marker = _planted(tmp_path)
    listed = _cli("plugins", env={"PYTHONPATH": str(app), "SUPERVISOR_ALLOW_PYTHONPATH": "1"})
    assert "(evilpkg 1.0)" in listed.stdout, listed
    assert marker.exists()


def test_starting_again_isolated_keeps_the_optimization_flags(tmp_path: Path) -> None:
    """Run with -OO but not -I, and with PYTHONPATH set: the supervisor starts
    again as ``python -IOO`` (isolated, and still without docstrings)."""
    show_parent = 'tr "\\0" " " </proc/$PPID/cmdline'  # the main process's parent: the init layer
    result = subprocess.run(
        [sys.executable, "-OO", SUPERVISOR, "--", "sh", "-c", show_parent],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
        timeout=30,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split()[:3] == [sys.executable, "-IOO", SUPERVISOR], result.stdout
