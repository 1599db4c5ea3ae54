"""The shipped examples are real: their processes start, become ready, and
exit cleanly on their stop signal (what `make demo` relies on)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from supervisor.config import ProcessSpec, ReadyCheck, load_config, start_levels, stop_levels

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _is_ready(check: ReadyCheck) -> bool:
    try:
        if check.kind == "http":
            assert isinstance(check.target, str)
            with urllib.request.urlopen(check.target, timeout=1) as response:
                return 200 <= response.status < 300
        if check.kind == "tcp":
            assert isinstance(check.target, str)
            host, _, port = check.target.rpartition(":")
            socket.create_connection((host, int(port)), timeout=1).close()
            return True
    except OSError:
        return False
    raise AssertionError(f"this test does not probe {check.kind} checks")


def _wait_until(condition: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if callable(condition) and condition():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def started(
    tmp_path: Path,
) -> Iterator[dict[str, tuple[ProcessSpec, subprocess.Popen[bytes], Path]]]:
    """webapp.yaml's processes, started level by level like the supervisor does."""
    ports = {"WEBAPP_PORT": str(_free_port()), "METRICS_PORT": str(_free_port())}
    config = load_config(str(EXAMPLES / "webapp.yaml"), ports)
    running: dict[str, tuple[ProcessSpec, subprocess.Popen[bytes], Path]] = {}
    try:
        for level in start_levels(config):
            for spec in level:
                log = tmp_path / f"{spec.name}.log"
                with log.open("wb") as output:
                    process = subprocess.Popen(
                        spec.command,
                        env={**os.environ, **spec.env},
                        cwd=spec.cwd,
                        stdout=output,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
                running[spec.name] = (spec, process, log)
            for spec in level:
                if spec.ready is not None:
                    ready = spec.ready
                    _wait_until(lambda ready=ready: _is_ready(ready), ready.timeout, f"{spec.name} ready")
        yield running
    finally:
        for _, process, _ in running.values():
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


def test_webapp_processes_work_and_stop_cleanly(
    started: dict[str, tuple[ProcessSpec, subprocess.Popen[bytes], Path]],
) -> None:
    _, _, worker_log = started["worker"]
    _wait_until(lambda: b"job 1: indexed" in worker_log.read_bytes(), 10, "the worker's first job")
    metrics_spec, _, _ = started["metrics"]
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_spec.env['METRICS_PORT']}/metrics", timeout=5) as response:
        assert b"webapp_up 1\n" in response.read()

    config_order = stop_levels(load_config(str(EXAMPLES / "webapp.yaml"), {}))
    for level in config_order:
        for spec in level:
            _, process, _ = started[spec.name]
            process.send_signal(spec.stop_signal)
        for spec in level:
            _, process, log = started[spec.name]
            assert spec.stop_timeout is not None
            returncode = process.wait(timeout=spec.stop_timeout)
            assert returncode == 0, (spec.name, log.read_text())


def test_minimal_example_command_exists() -> None:
    (app,) = load_config(str(EXAMPLES / "minimal.yaml"), {}).processes
    process = subprocess.Popen(app.command)
    try:
        time.sleep(0.2)
        assert process.poll() is None, "sleep infinity keeps running"
        process.send_signal(app.stop_signal)
        assert process.wait(timeout=5) == -app.stop_signal
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
