"""Tests of the drain-file plugin, written the way its author would.

The package is installed with pip into a private directory (exactly what
``pip install`` does in an image, without touching the test's environment),
then tested twice: hook by hook inside trio with hand-built Context and
Deadline objects (``autojump_clock`` makes the waits instant), and end to end
through the real ``supervisor`` CLI as PID 1 of a new PID namespace, which
finds the plugin through its entry point.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
import trio

from supervisor import SKIP, Config, Context, Deadline, ExitStatus, ProcessSpec, Settings, Timeline

PROJECT = Path(__file__).resolve().parents[1]
SUPERVISOR = str(Path(sys.executable).parent / "supervisor")


@pytest.fixture(scope="session")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """This package, pip-installed into a directory of its own."""
    # Build from a copy: pip builds in the source tree, and parallel test
    # workers must not share one.
    source = tmp_path_factory.mktemp("source") / "drain-file"
    shutil.copytree(PROJECT, source, ignore=shutil.ignore_patterns("tests", "build", "*.egg-info"))
    target = tmp_path_factory.mktemp("site")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--target",
            target,
            source,
        ],
        check=True,
    )
    return target


@pytest.fixture(scope="session")
def plugin(site: Path) -> Iterator[ModuleType]:
    """The installed module (not the source file next to this test)."""
    sys.path.insert(0, str(site))
    try:
        module = importlib.import_module("drain_file_plugin")
        assert Path(module.__file__ or "").parent == site
        yield module
    finally:
        sys.path.remove(str(site))
        sys.modules.pop("drain_file_plugin", None)


def _configure(plugin: ModuleType, section: dict[str, object], config: Config) -> tuple[object, list[str]]:
    settings = Settings.from_mapping(section, path="plugins.drain-file")
    parsed = plugin.supervisor_configure(settings=settings, config=config)
    return parsed, [p.message for p in settings.problems]


def _config(*names: str, main: str | None = None) -> Config:
    return Config(processes=tuple(ProcessSpec(name=n, command=("true",), main=n == main) for n in names))


def _context(settings: object) -> Context:
    return Context(
        plugin="drain-file",
        settings=settings,
        config=_config("web", main="web"),
        log=logging.getLogger("supervisor.plugin.drain-file"),
        processes={},
        timeline=Timeline(),
        main_exited=trio.Event(),
    )


class _Process:
    def __init__(self, name: str) -> None:
        self.name = name


# -- installation ---------------------------------------------------------------


def test_pip_installs_the_entry_point(site: Path, plugin: ModuleType) -> None:
    (dist,) = importlib.metadata.distributions(path=[str(site)])
    assert dist.metadata["Name"] == "supervisor-drain-file"
    (entry,) = dist.entry_points.select(group="supervisor.plugins")
    assert (entry.name, entry.value) == ("drain-file", "drain_file_plugin")


# -- settings -----------------------------------------------------------------------


def test_settings_default_to_the_main_process(plugin: ModuleType, tmp_path: Path) -> None:
    parsed, problems = _configure(plugin, {"path": str(tmp_path / "d")}, _config("web", "db", main="web"))
    assert problems == []
    assert parsed == plugin.DrainFile(path=str(tmp_path / "d"), delay=5.0, process="web")


def test_bad_settings_are_reported(plugin: ModuleType) -> None:
    _, problems = _configure(
        plugin,
        {"path": "run/draining", "delay": "soon", "process": "wbe", "dely": 1},
        _config("web"),
    )
    assert problems == [
        "unknown key 'dely' in plugins.drain-file (did you mean 'delay'?)",
        "plugins.drain-file.path: must be an absolute path, not 'run/draining'",
        "plugins.drain-file.delay: invalid duration 'soon': use a number of seconds or a number "
        "with ms, s, m or h (30, 30s, 500ms, 1.5s, 2m)",
        "plugins.drain-file.process: unknown process 'wbe' (processes: web)",
    ]


# -- hooks ----------------------------------------------------------------------------


async def test_pre_stop_writes_the_marker_and_waits(
    plugin: ModuleType, tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    marker = tmp_path / "run" / "draining"
    ctx = _context(plugin.DrainFile(path=str(marker), delay=5.0, process="web"))
    start = trio.current_time()
    await plugin.supervisor_pre_stop(ctx=ctx, deadline=Deadline(30))
    # (The file is written in a worker thread: no other timer may run in
    # this test, or the autojump clock would move on during the write.)
    assert trio.current_time() - start == pytest.approx(5)
    assert marker.read_text() == "draining\n"
    assert not list(marker.parent.glob(".*.tmp"))


async def test_the_wait_ends_when_the_main_process_exits(
    plugin: ModuleType, tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    ctx = _context(plugin.DrainFile(path=str(tmp_path / "draining"), delay=30.0, process="web"))
    start = trio.current_time()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(plugin.supervisor_pre_stop, ctx, Deadline(60))
        await trio.sleep(2)
        ctx.main_exited.set()
    assert trio.current_time() - start == pytest.approx(2)


async def test_the_wait_stays_inside_the_deadline(
    plugin: ModuleType, tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    ctx = _context(plugin.DrainFile(path=str(tmp_path / "draining"), delay=30.0, process="web"))
    start = trio.current_time()
    await plugin.supervisor_pre_stop(ctx=ctx, deadline=Deadline(10))  # 9 s left for hooks
    assert trio.current_time() - start == pytest.approx(9)


async def test_the_marker_goes_once_its_process_stopped(plugin: ModuleType, tmp_path: Path) -> None:
    marker = tmp_path / "draining"
    marker.write_text("draining\n")
    ctx = _context(plugin.DrainFile(path=str(marker), process="web"))
    stopped = ExitStatus(code=0)
    other = await plugin.supervisor_after_process_stop(
        ctx=ctx, deadline=Deadline(30), process=_Process("db"), status=stopped
    )
    assert marker.exists()  # another process: not yet,
    assert other is SKIP  # and no row in the timeline for it
    await plugin.supervisor_after_process_stop(ctx=ctx, deadline=Deadline(30), process=_Process("web"), status=stopped)
    assert not marker.exists()


async def test_post_stop_and_startup_remove_a_leftover(plugin: ModuleType, tmp_path: Path) -> None:
    marker = tmp_path / "draining"
    ctx = _context(plugin.DrainFile(path=str(marker), process=None))
    marker.write_text("draining\n")
    await plugin.supervisor_post_stop(ctx=ctx, deadline=Deadline(30))
    assert not marker.exists()
    marker.write_text("draining\n")  # from an earlier run of the container
    await plugin.supervisor_startup(ctx=ctx)
    assert not marker.exists()


# -- end to end -------------------------------------------------------------------------


def _supervisor_pid(unshare_pid: int) -> int:
    """The namespace's PID 1, seen from here: the only child of ``unshare``."""
    end = time.monotonic() + 10
    while time.monotonic() < end:
        children = Path(f"/proc/{unshare_pid}/task/{unshare_pid}/children").read_text().split()
        if children:
            return int(children[0])
        time.sleep(0.01)
    raise AssertionError("the supervisor did not start")


def test_a_real_shutdown_with_the_installed_plugin(site: Path, tmp_path: Path) -> None:
    marker = tmp_path / "drain" / "draining"
    ready = tmp_path / "ready"
    config = tmp_path / "deploy.yaml"
    config.write_text(
        f"grace_period: 20s\nlog: {{format: json}}\nplugins:\n  drain-file: {{path: {marker}, delay: 10s}}\n"
    )
    # The app: ready at once; exits 0 as soon as its readiness probe would
    # see the marker (its "last request" is done), long before the 10 s delay.
    app = f"touch {ready}; while [ ! -e {marker} ]; do sleep 0.05; done; echo saw the marker; exit 0"
    command = [
        "unshare",
        "-Urpf",
        "--mount-proc",
        "--kill-child",
        SUPERVISOR,
        "-c",
        str(config),
        "--",
        "sh",
        "-c",
        app,
    ]
    env = {**os.environ, "PYTHONPATH": str(site), "SUPERVISOR_ALLOW_PYTHONPATH": "1"}
    with subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
        try:
            end = time.monotonic() + 15
            while not ready.exists() and time.monotonic() < end and proc.poll() is None:
                time.sleep(0.02)
            assert ready.exists(), proc.communicate(timeout=10)
            started = time.monotonic()
            os.kill(_supervisor_pid(proc.pid), signal.SIGTERM)
            out, err = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()  # --kill-child takes the namespace with it
    assert proc.returncode == 0, err
    assert time.monotonic() - started < 8  # the main process's exit ended the wait
    assert "saw the marker" in out
    assert not marker.exists()
    records = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    messages = [r["message"] for r in records if r.get("logger") == "supervisor.plugin.drain-file"]
    assert f"removed drain marker {marker}" in messages
    (timeline,) = [r["timeline"] for r in records if "timeline" in r]
    phases = [s["phase"] for s in timeline if s.get("plugin") == "drain-file"]
    # post_stop found the marker gone already: it did nothing, and says so by
    # staying out of the timeline.
    assert phases == ["pre_stop", "after_process_stop"]
