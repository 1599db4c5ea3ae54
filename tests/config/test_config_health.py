"""The health: and control: sections and a process's health checks: values,
defaults, and every mistake as FILE:LINE:COLUMN."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from supervisor.config import Config, ControlSettings, render_plan

Load = Callable[..., Config]
Problems = Callable[..., list[str]]

_APP = "processes: [{name: app, main: true, command: x}]\n"


def test_process_and_pod_checks_with_their_defaults(load: Load) -> None:
    config = load(
        """
        health:
          listen: 8081
          checks:
            - name: db
              tcp: 127.0.0.1:5432
              level: ready
        processes:
          - name: web
            command: x
            health:
              http: http://127.0.0.1:8080/healthz
              period: 2s
          - name: app
            main: true
            command: y
            health:
              - exec: [check, one]
              - exec: check two
                on_failure: shutdown
        """
    )
    web, app1, app2, db = config.health.checks
    assert (web.name, web.process, web.period, web.timeout, web.threshold) == ("web", "web", 2.0, 2.0, 3)
    assert (web.level, web.on_failure, web.probe.kind) == ("alive", "restart", "http")
    assert (app1.name, app2.name, app2.on_failure, app2.probe.target) == (
        "app-1",
        "app-2",
        "shutdown",
        ("check", "two"),
    )
    assert (db.process, db.on_failure, db.level, db.timeout, db.period) == (None, "ignore", "ready", 3.0, 10.0)
    assert config.health.listen == ("0.0.0.0", 8081)
    assert config.control == ControlSettings()


def test_control_section(load: Load) -> None:
    assert load("control: {socket: false}\n" + _APP).control.enabled is False
    control = load("control: {socket: /run/x/ctl.sock, log_lines: 50}\n" + _APP).control
    assert (control.socket, control.log_lines) == ("/run/x/ctl.sock", 50)


MALFORMED = {
    "no probe": ("processes: [{name: a, command: x, health: {period: 1s}}]", "1:43", "needs one of http, tcp, exec"),
    "two probes": (
        "processes: [{name: a, command: x, health: {tcp: 'h:1', exec: x}}]",
        "1:56",
        "only one probe per check, got tcp and exec",
    ),
    "readiness-only kind": (
        "processes: [{name: a, command: x, health: {file: /x}}]",
        "1:44",
        "unknown key 'file' in processes[0].health",
    ),
    "bad level": (
        "processes: [{name: a, command: x, health: {tcp: 'h:1', level: up}}]",
        "1:63",
        "processes[0].health.level: expected one of alive, ready, got 'up'",
    ),
    "bad action": (
        "processes: [{name: a, command: x, health: {tcp: 'h:1', on_failure: reboot}}]",
        "1:68",
        "expected one of restart, shutdown, ignore, got 'reboot'",
    ),
    "zero threshold": (
        "processes: [{name: a, command: x, health: {tcp: 'h:1', threshold: 0}}]",
        "1:67",
        "processes[0].health.threshold: must be at least 1",
    ),
    "timeout longer than period": (
        "processes: [{name: a, command: x, health: {tcp: 'h:1', period: 1s, timeout: 2s}}]",
        "1:77",
        "processes[0].health.timeout: must not be longer than period (1s)",
    ),
    "bad tcp address": (
        "processes: [{name: a, command: x, health: {tcp: nowhere}}]",
        "1:49",
        "expected host:port such as 127.0.0.1:8080",
    ),
    "pod-wide check without a name": (
        "health: {checks: [{tcp: 'h:1'}]}\n" + _APP,
        "1:19",
        "health.checks[0]: missing required key 'name'",
    ),
    "restart without a process": (
        "health: {checks: [{name: c, tcp: 'h:1', on_failure: restart}]}\n" + _APP,
        "1:53",
        "restart needs a process: add process: NAME, or use shutdown or ignore",
    ),
    "unknown process": (
        "health: {checks: [{name: c, tcp: 'h:1', process: web}]}\n" + _APP,
        "1:50",
        "unknown process 'web' (processes: 'app')",
    ),
    "duplicate names": (
        "health: {checks: [{name: app, tcp: 'h:1'}]}\n"
        "processes: [{name: app, main: true, command: x, health: {tcp: 'h:2'}}]\n",
        "1:19",
        "duplicate health check name 'app'",
    ),
    "bad listen": ("health: {listen: 'localhost'}\n" + _APP, "1:18", "health.listen: expected host:port"),
    "listen port out of range": ("health: {listen: 70000}\n" + _APP, "1:18", "port 70000 is out of range 1-65535"),
    "relative socket": (
        "control: {socket: ctl.sock}\n" + _APP,
        "1:19",
        "control.socket: expected an absolute path (or false to turn the socket off)",
    ),
    "unknown control key": ("control: {sock: /x}\n" + _APP, "1:11", "unknown key 'sock' in control"),
}


@pytest.mark.parametrize(("text", "where", "fragment"), MALFORMED.values(), ids=MALFORMED.keys())
def test_malformed(problems: Problems, text: str, where: str, fragment: str) -> None:
    lines = problems(text)
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"deploy.yaml:{where}: "), lines
    assert fragment in lines[0], lines


def test_check_shows_the_checks(load: Load) -> None:
    config = load(
        """
        health: {listen: "127.0.0.1:8081"}
        processes:
          - name: web
            main: true
            command: x
            health: {http: "http://127.0.0.1:8080/healthz", threshold: 2}
        """
    )
    plan = render_plan(config, {})
    assert "Health and control" in plan
    assert (
        "check web                  of web, alive: GET http://127.0.0.1:8080/healthz answers 2xx/3xx; every 10s, "
        "timeout 3s; 2 failure(s) in a row: restart web"
    ) in plan
    assert "probe listener             http://127.0.0.1:8081/livez, /readyz, /metrics" in plan
