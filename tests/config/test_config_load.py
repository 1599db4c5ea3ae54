"""Valid files: every key is accepted and resolved to the model's values."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from pathlib import Path

import pytest

from supervisor.config import (
    Backoff,
    Capabilities,
    Config,
    Position,
    ProcessSpec,
    ReadyCheck,
    Settings,
    load_config,
)

Load = Callable[..., Config]  # the `load` fixture
WriteFile = Callable[[str], str]  # the `write` fixture

FULL = """
grace_period: 45s
log: {format: json, level: debug}
processes:
  - name: libvirtd
    command: ["libvirtd", "--listen"]
    ready: {socket: /run/libvirt/libvirt-sock, timeout: 2m, interval: 250ms}
  - name: controller
    command: /manager --leader-elect --metrics-bind-address ":8080"
    depends_on: [libvirtd]
    main: true
    env: {LOG_LEVEL: "${LOG_LEVEL:-info}", PORT: 8080, DEBUG: yes, EMPTY: ""}
    cwd: /
    user: "65532"
    group: 65533
    no_new_privs: true
    capabilities: {drop: [all], keep: [NET_BIND_SERVICE, cap_kill]}
    restart: on-failure
    backoff: {initial: 500ms, max: 1m, max_restarts: 3, window: 2m}
    on_failure: ignore
    stop_signal: SIGINT
    stop_timeout: 20s
    process_group: false
    log_prefix: true
plugins:
  sleep: {seconds: 5}
  kubernetes:
"""


def test_every_key_is_resolved(load: Load) -> None:
    config = load(FULL, {"LOG_LEVEL": "warning"})
    assert config.grace_period == 45.0
    assert (config.log_format, config.log_level) == ("json", "debug")
    libvirtd, controller = config.processes
    assert libvirtd == ProcessSpec(
        name="libvirtd",
        command=("libvirtd", "--listen"),
        ready=ReadyCheck(kind="socket", target="/run/libvirt/libvirt-sock", timeout=120.0, interval=0.25),
        position=libvirtd.position,
    )
    assert controller.command == ("/manager", "--leader-elect", "--metrics-bind-address", ":8080")
    assert controller.depends_on == ("libvirtd",)
    assert controller.main is True
    assert dict(controller.env) == {
        "LOG_LEVEL": "warning",
        "PORT": "8080",
        "DEBUG": "yes",
        "EMPTY": "",
    }
    assert (controller.cwd, controller.user, controller.group) == ("/", "65532", "65533")
    assert controller.no_new_privs is True
    assert controller.capabilities == Capabilities(drop=("all",), keep=("net_bind_service", "kill"))
    assert controller.restart == "on-failure"
    assert controller.backoff == Backoff(initial=0.5, max=60.0, max_restarts=3, window=120.0)
    assert controller.on_failure == "ignore"
    assert controller.stop_signal == signal.SIGINT
    assert controller.stop_timeout == 20.0
    assert controller.process_group is False
    assert controller.log_prefix is True
    assert controller.ready is None
    assert config.main is controller


def test_defaults(load: Load) -> None:
    config = load("processes: [{name: app, command: [sleep, '1']}]")
    assert config.grace_period == 30.0
    assert (config.log_format, config.log_level) == ("text", "info")
    assert dict(config.plugins) == {}
    (app,) = config.processes
    assert app == ProcessSpec(name="app", command=("sleep", "1"), position=app.position)
    assert app.restart == "never" and app.on_failure == "shutdown"
    assert app.stop_signal == signal.SIGTERM and app.stop_timeout is None
    assert app.process_group is True and app.log_prefix is False
    assert config.main is None


def test_positions_are_recorded(write: WriteFile) -> None:
    path = write(
        """
        grace_period: 10s
        processes:
          - name: a
            command: [true]
        plugins: {}
        """
    )
    config = load_config(path, {})
    assert config.path == path
    assert config.positions["grace_period"] == Position(path, 1, 1)
    assert config.positions["processes"] == Position(path, 2, 1)
    assert config.positions["plugins"] == Position(path, 5, 1)
    assert config.processes[0].position == Position(path, 3, 5)


@pytest.mark.parametrize(
    ("ready", "expected"),
    [
        ("{socket: /run/x.sock}", ReadyCheck("socket", "/run/x.sock")),
        ('{tcp: "127.0.0.1:8080"}', ReadyCheck("tcp", "127.0.0.1:8080")),
        ('{tcp: "[::1]:8080"}', ReadyCheck("tcp", "[::1]:8080")),
        ("{tcp: localhost:5432}", ReadyCheck("tcp", "localhost:5432")),
        (
            "{http: 'http://127.0.0.1:8080/healthz'}",
            ReadyCheck("http", "http://127.0.0.1:8080/healthz"),
        ),
        ("{exec: [pg_isready, -q]}", ReadyCheck("exec", ("pg_isready", "-q"))),
        ("{exec: 'test -e /tmp/x'}", ReadyCheck("exec", ("test", "-e", "/tmp/x"))),
        ("{file: /tmp/ready}", ReadyCheck("file", "/tmp/ready")),
        ("{after: 2s}", ReadyCheck("after", 2.0)),
        ("{after: 0}", ReadyCheck("after", 0.0)),
        (
            "{file: /r, timeout: 5, interval: 1s}",
            ReadyCheck("file", "/r", timeout=5.0, interval=1.0),
        ),
    ],
)
def test_ready_checks(load: Load, ready: str, expected: ReadyCheck) -> None:
    config = load(f"processes: [{{name: a, command: x, ready: {ready}}}]")
    assert config.processes[0].ready == expected


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("30", 30.0),
        ("30s", 30.0),
        ("500ms", 0.5),
        ("1.5s", 1.5),
        ("2m", 120.0),
        ("1h", 3600.0),
        ("0", 0.0),
    ],
)
def test_durations(load: Load, value: str, seconds: float) -> None:
    config = load(f"grace_period: 2h\nprocesses: [{{name: a, command: x, stop_timeout: {value}}}]")
    assert config.grace_period == 7200.0
    assert config.processes[0].stop_timeout == seconds


@pytest.mark.parametrize(("value", "number"), [("TERM", 15), ("SIGTERM", 15), ("sigusr1", 10), ("9", 9), ("2", 2)])
def test_signals(load: Load, value: str, number: int) -> None:
    config = load(f"processes: [{{name: a, command: x, stop_signal: {value}}}]")
    assert config.processes[0].stop_signal == number


def test_command_string_is_split_like_a_shell(load: Load) -> None:
    config = load(
        r"""
        processes:
          - name: a
            command: sh -c 'echo "$HOME" && exit 3' --name="two words" back\ slash
        """
    )
    assert config.processes[0].command == (
        "sh",
        "-c",
        'echo "$HOME" && exit 3',
        "--name=two words",
        "back slash",
    )


def test_command_items_are_taken_as_written(load: Load) -> None:
    config = load("processes: [{name: a, command: [echo, yes, 1.10, 0x1F, 5, null-ish]}]")
    assert config.processes[0].command == ("echo", "yes", "1.10", "0x1F", "5", "null-ish")


def test_user_and_group_names_known_to_the_system(load: Load) -> None:
    config = load("processes: [{name: a, command: x, user: root, group: root}]")
    assert (config.processes[0].user, config.processes[0].group) == ("root", "root")


def test_depends_on_accepts_a_single_name(load: Load) -> None:
    config = load(
        """
        processes:
          - {name: db, command: x}
          - {name: app, command: y, depends_on: db}
        """
    )
    assert config.processes[1].depends_on == ("db",)


def test_plugins_become_settings(load: Load) -> None:
    config = load(FULL)
    assert list(config.plugins) == ["sleep", "kubernetes"]
    sleep = config.plugins["sleep"]
    assert isinstance(sleep, Settings)
    assert sleep.path == "plugins.sleep"
    assert sleep.duration("seconds", 1.0) == 5.0
    assert config.plugins["kubernetes"].keys() == []
    assert sleep.problems == []


def test_plugin_settings_strings_are_expanded(load: Load) -> None:
    config = load(
        """
        plugins:
          http:
            url: "http://${HOST:-localhost}:${PORT}/drain"
            nested: {list: ["${PORT}"]}
        """,
        {"PORT": "9000"},
    )
    http = config.plugins["http"]
    assert http.string("url") == "http://localhost:9000/drain"
    assert http.raw("nested") == {"list": ["9000"]}


def test_x_keys_hold_anchors(load: Load) -> None:
    config = load(
        """
        x-defaults: &defaults {restart: always, stop_timeout: 5s}
        x-anything-else: [1, 2]
        processes:
          - {<<: *defaults, name: a, command: x}
        """
    )
    assert (config.processes[0].restart, config.processes[0].stop_timeout) == ("always", 5.0)


def test_anchors_aliases_and_merge_keys(load: Load) -> None:
    config = load(
        """
        processes:
          - &base
            name: a
            command: x
            restart: always
            stop_timeout: 5s
            env: &env {A: "1"}
          - <<: *base
            name: b
            stop_timeout: 1s
          - name: c
            command: z
            env: *env
        """
    )
    a, b, c = config.processes
    assert (a.restart, a.stop_timeout) == ("always", 5.0)
    assert (b.name, b.command, b.restart, b.stop_timeout) == ("b", ("x",), "always", 1.0)
    assert dict(b.env) == dict(c.env) == {"A": "1"}


def test_environment_defaults_to_the_process_environment(write: WriteFile, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SUPERVISOR_TEST_CMD", "from-env")
    config = load_config(write("processes: [{name: a, command: '${SUPERVISOR_TEST_CMD}'}]"))
    assert config.processes[0].command == ("from-env",)
    assert os.environ["SUPERVISOR_TEST_CMD"] == "from-env"


def test_plain_references_take_the_type_of_their_value(load: Load) -> None:
    config = load(
        """
        processes:
          - name: a
            command: x
            main: ${MAIN:-true}
            stop_timeout: ${STOP:-15}
            backoff:
              max_restarts: ${RESTARTS}
            cwd: "${DIR:-123}"
        """,
        {"RESTARTS": "7"},
    )
    a = config.processes[0]
    assert a.main is True and a.stop_timeout == 15.0 and a.backoff.max_restarts == 7
    assert a.cwd == "123"


def test_empty_process_list_is_valid(load: Load) -> None:
    assert load("processes: []").processes == ()
    assert load("grace_period: 5s").processes == ()
    assert load("processes:").processes == ()


def test_utf8_bom_and_utf16_are_read(tmp_path: Path) -> None:
    text = "processes: [{name: a, command: [echo, 'é']}]\n"
    for name, data in [
        ("bom.yaml", b"\xef\xbb\xbf" + text.encode()),
        ("u16.yaml", text.encode("utf-16")),
    ]:
        (tmp_path / name).write_bytes(data)
        assert load_config(str(tmp_path / name), {}).processes[0].command == ("echo", "é")


def test_dates_stay_strings(load: Load) -> None:
    config = load("processes: [{name: a, command: [backup, 2024-01-31], cwd: 2024-01-31}]")
    assert config.processes[0].command == ("backup", "2024-01-31")
    assert config.processes[0].cwd == "2024-01-31"


def test_config_is_immutable(load: Load) -> None:
    config = load(FULL)
    with pytest.raises(AttributeError):
        config.grace_period = 1.0  # type: ignore[misc]
    with pytest.raises(TypeError):
        config.processes[1].env["X"] = "y"  # type: ignore[index]
    assert isinstance(config, Config)
