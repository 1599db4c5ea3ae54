"""The built-in plugins through the real CLI, as PID 1 of a new PID namespace:
enabled from the YAML, found through their installed entry points, run by
the plugin host during a real shutdown, and visible in the timeline."""

from __future__ import annotations

import json
import signal
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.pid1 import Supervisor, run
from tests.plugins._helpers import QuietHandler, serve_http

# The main process: runs until SIGTERM, then exits 0 (as a well-behaved app does).
APP = ["sh", "-c", "trap 'exit 0' TERM; while :; do sleep 0.05; done"]


def _config(tmp_path: Path, plugins: str, *, log_format: str = "json") -> str:
    path = tmp_path / "deploy.yaml"
    path.write_text(
        f"grace_period: 10s\nlog: {{format: {log_format}}}\nplugins:\n"
        + textwrap.indent(textwrap.dedent(plugins), "  ")
    )
    return str(path)


def _timeline(sup: Supervisor) -> list[dict[str, object]]:
    for record in sup.json_records():
        if "timeline" in record:
            return record["timeline"]  # type: ignore[return-value]
    raise AssertionError(f"no timeline in the output\n{sup.output}")


def _steps(sup: Supervisor, plugin: str) -> list[tuple[object, object, object]]:
    return [(s["phase"], s["name"], s["outcome"]) for s in _timeline(sup) if s.get("plugin") == plugin]


def _messages(sup: Supervisor, logger: str) -> list[str]:
    return [str(r["message"]) for r in sup.json_records() if r.get("logger") == logger]


def _shutdown(config: str, command: list[str] = APP) -> tuple[int, Supervisor]:
    """Start, wait until the main process runs, SIGTERM, wait for the exit."""
    with Supervisor(["-c", config, "--", *command]) as sup:
        sup.wait_for(r"started sh \(pid")
        sup.signal(signal.SIGTERM)
        return sup.wait(), sup


def test_sleep_delays_the_stop_of_the_main_process(tmp_path: Path) -> None:
    config = _config(tmp_path, "sleep: {seconds: 1500ms}\n")
    status, sup = _shutdown(config)
    assert status == 0, sup.output
    timeline = _timeline(sup)
    (sleep,) = [s for s in timeline if s.get("plugin") == "sleep"]
    assert (sleep["phase"], sleep["outcome"]) == ("pre_stop", "ok")
    assert 1.5 <= float(sleep["duration"]) < 8  # type: ignore[arg-type]  # 8: not the 9 s the deadline allows
    (stop,) = [s for s in timeline if s["phase"] == "stop"]
    assert float(stop["start"]) >= 1.5  # type: ignore[arg-type]
    assert "sleeping 1.5s before stopping processes" in _messages(sup, "supervisor.plugin.sleep")


def test_sleep_is_cut_short_when_the_main_process_exits(tmp_path: Path) -> None:
    config = _config(tmp_path, "sleep: {seconds: 30s}\n")
    # The main process does not wait for its stop signal: it exits 7 after 1 s.
    status, sup = _shutdown(config, ["sh", "-c", "trap '' TERM; sleep 1; exit 7"])
    assert status == 7, sup.output
    (sleep,) = [s for s in _timeline(sup) if s.get("plugin") == "sleep"]
    assert float(sleep["duration"]) < 8, sleep  # type: ignore[arg-type]  # not the 9 s the deadline allows


def test_exec_runs_commands_around_the_main_process(tmp_path: Path) -> None:
    marker = tmp_path / "exit-code"
    config = _config(
        tmp_path,
        f"""\
        exec:
          commands:
            - phase: pre_stop
              name: drain
              command: [sh, -c, "echo draining now; echo to stderr >&2"]
              timeout: 5s
            - phase: after_process_stop
              process: sh
              name: record
              command: [sh, -c, 'echo $SUPERVISOR_EXIT_CODE > {marker}']
            - phase: post_stop
              name: fails
              command: [sh, -c, "exit 4"]
        """,
    )
    status, sup = _shutdown(config)
    assert status == 0, sup.output  # a failing command is reported, not fatal
    assert marker.read_text() == "0\n"
    messages = _messages(sup, "supervisor.plugin.exec")
    assert "drain: draining now" in messages
    assert "drain: to stderr" in messages
    assert any(m.startswith("fails: exited with code 4") for m in messages)
    steps = _steps(sup, "exec")
    assert ("pre_stop", "drain", "ok") in steps
    assert ("after_process_stop", "record", "ok") in steps
    assert ("post_stop", "fails", "error") in steps


def test_exec_timeout_is_bounded_and_not_fatal(tmp_path: Path) -> None:
    config = _config(
        tmp_path,
        """\
        exec:
          commands:
            - {phase: pre_stop, name: stuck, command: sleep 60, timeout: 500ms}
        """,
    )
    status, sup = _shutdown(config)
    assert status == 0, sup.output
    assert ("pre_stop", "stuck", "timeout") in _steps(sup, "exec")


def test_exec_wind_down_runs_on_after_the_main_process_exits(tmp_path: Path) -> None:
    # The main process exits by itself once the wind_down command has
    # started; pre_stop is then cut short (nothing is left to drain), but
    # wind_down is not: its command outlives the main process and finishes.
    started, pid_file, marker = tmp_path / "started", tmp_path / "main.pid", tmp_path / "flushed"
    main = ["sh", "-c", f"trap '' TERM; echo $$ > {pid_file}; while [ ! -e {started} ]; do sleep 0.05; done"]
    flush = f"touch {started}; while kill -0 $(cat {pid_file}) 2>/dev/null; do sleep 0.05; done; echo yes > {marker}"
    config = _config(
        tmp_path,
        f"""\
        exec:
          commands:
            - {{phase: pre_stop, name: drain, command: sleep 30}}
            - {{phase: wind_down, name: flush, command: [sh, -c, "{flush}"]}}
        """,
    )
    status, sup = _shutdown(config, main)
    assert status == 0, sup.output
    assert marker.read_text() == "yes\n"
    steps = _steps(sup, "exec")
    assert ("wind_down", "flush", "ok") in steps, steps
    assert ("pre_stop", "drain", "cancelled") in steps, steps


@pytest.fixture
def drain_endpoint() -> Iterator[tuple[str, list[str]]]:
    """An app's /drain endpoint on 127.0.0.1; yields its URL and the requests seen."""
    seen: list[str] = []

    class Handler(QuietHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            seen.append(f"{self.command} {self.path} {self.rfile.read(length).decode()}")
            self.send_response(202)
            self.send_header("Content-Length", "0")
            self.end_headers()

    with serve_http(Handler) as port:
        yield f"http://127.0.0.1:{port}/drain", seen


def test_http_calls_the_drain_endpoint_before_the_stop(tmp_path: Path, drain_endpoint: tuple[str, list[str]]) -> None:
    # The namespace has its own PIDs but shares the network: 127.0.0.1 is the test's.
    url, seen = drain_endpoint
    config = _config(
        tmp_path,
        f"""\
        http:
          requests:
            - {{phase: pre_stop, url: "{url}", method: POST, body: now, expect: 202, timeout: 5s}}
        """,
    )
    status, sup = _shutdown(config)
    assert status == 0, sup.output
    assert seen == ["POST /drain now"]
    assert ("pre_stop", f"POST {url}", "ok") in _steps(sup, "http")


def test_the_text_timeline_names_each_plugin_step(tmp_path: Path) -> None:
    config = _config(
        tmp_path,
        """\
        sleep: {seconds: 200ms}
        exec:
          commands:
            - {phase: pre_stop, name: quit-nginx, command: "true"}
        """,
        log_format="text",
    )
    status, sup = _shutdown(config)
    assert status == 0, sup.output
    rendered = "\n".join(sup.stderr_lines)
    assert "pre_stop            sleep: pre_stop" in rendered
    assert "pre_stop            exec: quit-nginx" in rendered


def test_bad_plugin_settings_are_one_line_each_and_exit_2(tmp_path: Path) -> None:
    config = _config(
        tmp_path,
        """\
        sleep: {seconds: soon}
        exec:
          commands:
            - {phase: after_process_stop, process: nope, command: "true"}
        http:
          requests:
            - {phase: pre_stop, url: "localhost:8080/drain"}
        """,
    )
    status, sup = run(["-c", config, "--", "true"])
    assert status == 2, sup.output
    assert "Traceback" not in sup.output
    errors = [line for line in sup.stderr_lines if line.startswith(f"{config}:")]
    assert errors == [
        f"{config}:4:20: plugins.sleep.seconds: invalid duration 'soon': use a number of seconds "
        "or a number with ms, s, m or h (30, 30s, 500ms, 1.5s, 2m)",
        f"{config}:7:46: plugins.exec.commands[0].process: unknown process 'nope' (processes: true)",
        f"{config}:10:32: plugins.http.requests[0].url: expected an http:// or https:// URL "
        "such as http://127.0.0.1:8080/healthz, got 'localhost:8080/drain'",
    ], sup.output


def test_supervisor_plugins_lists_the_built_ins() -> None:
    status, sup = run(["plugins"], pid1=False)
    assert status == 0, sup.output
    listing = "\n".join(sup.stdout_lines)
    for name, dist in [
        ("sleep", "pid1-supervisor-sleep"),
        ("exec", "pid1-supervisor-exec"),
        ("http", "pid1-supervisor-http"),
    ]:
        assert f"{name}  ({dist} 0.1.0)" in listing, listing


def test_json_records_are_parseable(tmp_path: Path) -> None:
    # Command output goes into the JSON log as data, never breaking a record.
    config = _config(
        tmp_path,
        """\
        exec:
          commands:
            - phase: pre_stop
              name: quoting
              command: [printf, '{"not": "json\\n']
        """,
    )
    status, sup = _shutdown(config)
    assert status == 0, sup.output
    assert 'quoting: {"not": "json' in _messages(sup, "supervisor.plugin.exec")
    for line in sup.stderr_lines:
        if line.startswith("{"):
            json.loads(line)
