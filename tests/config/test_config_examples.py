"""The shipped examples, as a user meets them.

Every supervisor configuration under examples/ passes ``supervisor check``.
Those that run on a plain machine (webapp.yaml, demo.yaml -- what ``make
demo`` runs -- and minimal.yaml) are run with the real CLI as PID 1 of a new
PID namespace, and the test asserts what a user sees: the log lines in
start order, readiness as ``supervisor status`` reports it over the control
socket, the services answering, and a SIGTERM that stops the processes in
reverse order with a clean exit.

Checked with ``supervisor check`` only (validation and the printed plan),
because they need what this test does not start: examples/libvirt/pod.yaml
(libvirtd, virtlogd and a VM provider controller), the supervisor.yaml of
examples/kubernetes/configmap.yaml (a controller image and a cluster), and
examples/reference.yaml (placeholder commands).  Their behaviour is tested
against the real components in tests/libvirt and tests/kubernetes.
"""

from __future__ import annotations

import functools
import signal
import socket
import subprocess
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.control._ctl import row, wait_status
from tests.pid1 import SUPERVISOR, Supervisor

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

# Run here, with the real CLI as PID 1.
RUN = ("webapp.yaml", "demo.yaml", "minimal.yaml")
# Validated only (see the module's docstring); the ConfigMap's entry is the
# supervisor.yaml it carries.
CHECK_ONLY = ("reference.yaml", "libvirt/pod.yaml", "kubernetes/configmap.yaml")
# What the ConfigMap's Deployment sets from the downward API.
POD_ENV = {"POD_NAME": "example-controller-7d9c-abcde"}


def _configurations() -> set[str]:
    """Every YAML file under examples/ that is, or carries, a supervisor
    configuration (a ``processes:`` key)."""
    found = set()
    for path in EXAMPLES.rglob("*.yaml"):
        for document in yaml.safe_load_all(path.read_text()):
            if isinstance(document, dict) and "processes" in _configuration(document):
                found.add(str(path.relative_to(EXAMPLES)))
    return found


def _configuration(document: dict[str, object]) -> dict[str, object]:
    data = document.get("data")
    if document.get("kind") == "ConfigMap" and isinstance(data, dict) and "supervisor.yaml" in data:
        inner = yaml.safe_load(data["supervisor.yaml"])
        return inner if isinstance(inner, dict) else {}
    return document


def _config_file(example: str, tmp_path: Path) -> Path:
    """The configuration file of ``example`` (the ConfigMap's, written out)."""
    path = EXAMPLES / example
    if example.startswith("kubernetes/"):
        (config_map,) = [d for d in yaml.safe_load_all(path.read_text()) if d.get("kind") == "ConfigMap"]
        path = tmp_path / "supervisor.yaml"
        path.write_text(config_map["data"]["supervisor.yaml"])
    return path


def test_every_example_is_run_or_checked() -> None:
    assert _configurations() == {*RUN, *CHECK_ONLY}


@pytest.mark.parametrize("example", [*RUN, *CHECK_ONLY])
def test_supervisor_check_accepts_the_example(example: str, tmp_path: Path) -> None:
    path = _config_file(example, tmp_path)
    # --no-compile: no plan is left in the repository's examples/, so the
    # runs below always take the path a fresh checkout takes.
    result = subprocess.run(
        [SUPERVISOR, "check", "--no-compile", "-c", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={"PATH": "/usr/bin:/bin", **POD_ENV},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith(f"Configuration {path} is valid.\n"), result.stdout
    assert "\nStart order\n" in result.stdout and "\nShutdown plan " in result.stdout, result.stdout


# -- run: the web app ---------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _get(url: str) -> tuple[int, bytes]:
    with urllib.request.urlopen(url, timeout=10) as response:
        return response.status, response.read()


@contextmanager
def _web_app(example: str) -> Iterator[tuple[Supervisor, dict[str, str]]]:
    """``example`` (webapp.yaml or demo.yaml: the same processes) under the
    supervisor as PID 1, on free ports, logging JSON; yields once
    ``supervisor status`` says all three run and are ready."""
    ports = {"WEBAPP_PORT": str(_free_port()), "METRICS_PORT": str(_free_port())}
    with Supervisor(["--log-format", "json", "-c", str(EXAMPLES / example)], env=ports) as sup:
        answer = wait_status(
            sup, lambda a: all(p["state"] == "running" and p["readiness"] == "ready" for p in a["processes"]), 60
        )
        assert [(p["name"], p["main"]) for p in answer["processes"]] == [
            ("web", True),
            ("worker", False),
            ("metrics", False),
        ], answer
        assert answer["alive"] and answer["ready"], answer
        yield sup, ports


class _Log:
    """A finished (or running) supervisor's JSON log, by message."""

    def __init__(self, sup: Supervisor) -> None:
        records = sup.json_records()
        self.messages = [str(r["message"]) for r in records]
        self.output = sup.output
        self._sup = sup

    @functools.cached_property
    def timeline(self) -> list[dict[str, Any]]:
        return self._sup.timeline()

    def at(self, start: str) -> int:
        """Where the first message starting with ``start`` is."""
        for index, message in enumerate(self.messages):
            if message.startswith(start):
                return index
        raise AssertionError(f"no log line starts with {start!r}\n{self.output}")

    def stop(self, name: str) -> dict[str, Any]:
        return next(step for step in self.timeline if step["phase"] == "stop" and step["name"] == name)


def _assert_started_in_order(sup: Supervisor) -> None:
    """web first; worker and metrics only once web answered HTTP."""
    log = _Log(sup)
    web_ready = log.at("web is ready (http GET http://127.0.0.1:")
    assert log.at("started web (pid") < web_ready < log.at("started worker (pid"), log.output
    assert web_ready < log.at("started metrics (pid") < log.at("metrics is ready (tcp 127.0.0.1:"), log.output


def _assert_stopped_in_reverse(sup: Supervisor) -> _Log:
    """worker and metrics stopped, each exiting 0, before web got its
    SIGINT; then web exited 0, and so did the supervisor."""
    log = _Log(sup)
    stop_web = log.at("stopping web (pid")
    assert "with SIGINT" in log.messages[stop_web], log.output
    web = log.stop("web")
    for name in ("worker", "metrics"):
        assert log.at(f"stopping {name} (pid") < log.at(f"{name} (pid") < stop_web, log.output
        assert "exited with code 0" in log.messages[log.at(f"{name} (pid")], log.output
        step = log.stop(name)
        # The timeline's figures are rounded to 0.1 ms each: allow for that.
        assert step["outcome"] == "ok" and step["start"] + step["duration"] <= web["start"] + 2e-4, log.timeline
    assert web["outcome"] == "ok" and web["detail"] == "exited with code 0", log.timeline
    assert "exiting with status 0 (main process web exited with code 0)" in log.messages, log.output
    return log


def test_webapp_starts_in_order_serves_and_stops_in_reverse() -> None:
    with _web_app("webapp.yaml") as (sup, ports):
        _assert_started_in_order(sup)
        status, page = _get(f"http://127.0.0.1:{ports['WEBAPP_PORT']}/")
        assert status == 200 and page
        status, metrics = _get(f"http://127.0.0.1:{ports['METRICS_PORT']}/metrics")
        assert status == 200 and b"webapp_up 1\n" in metrics, metrics
        sup.wait_for(r"^\[worker\] job 1: indexed \d+ bytes$", timeout=30, stream="stdout")
        sup.signal(signal.SIGTERM)
        assert sup.wait() == 0, sup.output
    log = _assert_stopped_in_reverse(sup)
    assert [step["phase"] for step in log.timeline] == ["stop"] * 3, log.timeline


def test_demo_runs_its_hooks_around_the_stops() -> None:
    # What `make demo` shows: the sleep plugin's 1 s before anything stops,
    # the exec plugin's clean-up command once every process has gone.
    with _web_app("demo.yaml") as (sup, _):
        _assert_started_in_order(sup)
        sup.signal(signal.SIGTERM)
        assert sup.wait() == 0, sup.output
    log = _assert_stopped_in_reverse(sup)
    pre_stop = next(step for step in log.timeline if step["phase"] == "pre_stop" and step.get("plugin") == "sleep")
    # On the supervisor's clock: the plugin's 1 s, never less; a busy
    # machine may add to it, but not the seconds of a wrong setting.
    assert 1.0 <= pre_stop["duration"] < 4.0, log.timeline
    stops = [step for step in log.timeline if step["phase"] == "stop"]
    assert min(step["start"] for step in stops) >= pre_stop["start"] + pre_stop["duration"], log.timeline
    cleanup = next(step for step in log.timeline if step["phase"] == "post_stop" and step["name"] == "cleanup")
    assert cleanup["outcome"] == "ok", log.timeline
    assert cleanup["start"] + 2e-4 >= max(step["start"] + step["duration"] for step in stops), log.timeline
    assert log.at("cleanup: all processes are gone, cleaning up") > log.at("web (pid"), log.output


def test_minimal_runs_until_sigterm() -> None:
    with Supervisor(["-c", str(EXAMPLES / "minimal.yaml")]) as sup:
        answer = wait_status(sup, lambda a: row(a, "app")["state"] == "running")
        assert row(answer, "app")["main"], answer
        sup.signal(signal.SIGTERM)
        # `sleep infinity` dies of its SIGTERM: the container reports 128+15.
        assert sup.wait() == 128 + signal.SIGTERM, sup.output
    assert "stopping app (pid" in sup.output
    assert "exiting with status 143" in sup.output
