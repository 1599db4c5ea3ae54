"""The plan `supervisor check` prints, for the shipped examples and edge cases."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from supervisor.config import (
    Config,
    ProcessSpec,
    ReadyCheck,
    budget_problems,
    load_config,
    render_plan,
)
from supervisor.config._load import TOP_LEVEL_KEYS
from supervisor.config._process import PROCESS_KEYS
from supervisor.config._ready import READY_KINDS

Load = Callable[..., Config]  # the `load` fixture


EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

HOOKS = {
    "supervisor_startup": ["http"],
    "background": ["kubernetes"],
    "shutdown_started": ["kubernetes"],
    "pre_stop": ["sleep", "kubernetes"],
    "before_process_stop": ["audit"],
    "after_process_stop:web": ["kubernetes"],
    "post_stop": ["exec"],
    "process_exited": ["audit"],
    "configure": ["audit", "http"],
    "add_commands": ["kubernetes"],
    "after_process_stop:gone": [],
}

WEBAPP_PLAN = """\
Configuration {path} is valid.

Start order
  startup hooks              http
  1. web (main)              ready when GET http://127.0.0.1:8080/ answers 2xx/3xx (within 10s)
  2. worker                  after web; restart on-failure (at most 5 in 60s)
  2. metrics                 after web; ready when 127.0.0.1:9100 accepts connections (within 60s)
  background hooks           kubernetes

Shutdown plan (grace period 15s)
  Started by SIGINT, SIGTERM (shutdown_signals); any other signal is forwarded to the main process.
  shutdown_started           kubernetes                            [0s]
  pre_stop                   sleep, kubernetes                     [from 0s]
  1. stop worker             SIGTERM, up to 3s                     [pre_stop end +0s – +3s]
     before_process_stop     audit
  1. stop metrics            SIGTERM, up to 3s                     [pre_stop end +0s – +3s]
     before_process_stop     audit
  2. stop web                SIGINT, up to 5s                      [pre_stop end +3s – +8s]
     before_process_stop     audit
     after_process_stop      kubernetes
  post_stop                  exec
  SIGKILL                    to every process still running        [14.75s]
  Stop timeouts claim at most 8s of 15s; they all fit if pre_stop ends within 7s.
  Kill time 14.75s: SIGKILL to what still runs, 250ms before the grace period ends,
  so that PID 1 need not step in (at 15s it kills everything and exits 137). Hooks end 1s before the kill.

Event hooks
  process_exited             audit
"""

WEBAPP_PLAN_NO_HOOKS = """\
Configuration {path} is valid.

Start order
  1. web (main)              ready when GET http://127.0.0.1:8080/ answers 2xx/3xx (within 10s)
  2. worker                  after web; restart on-failure (at most 5 in 60s)
  2. metrics                 after web; ready when 127.0.0.1:9100 accepts connections (within 60s)

Shutdown plan (grace period 15s)
  Started by SIGINT, SIGTERM (shutdown_signals); any other signal is forwarded to the main process.
  1. stop worker             SIGTERM, up to 3s                     [0s – 3s]
  1. stop metrics            SIGTERM, up to 3s                     [0s – 3s]
  2. stop web                SIGINT, up to 5s                      [3s – 8s]
  post_stop                  -
  SIGKILL                    to every process still running        [14.75s]
  Stop timeouts claim at most 8s of 15s; 7s to spare.
  Kill time 14.75s: SIGKILL to what still runs, 250ms before the grace period ends,
  so that PID 1 need not step in (at 15s it kills everything and exits 137). Hooks end 1s before the kill.
"""

MINIMAL_PLAN = """\
Configuration {path} is valid.

Start order
  1. app (main)

Shutdown plan (grace period 30s)
  Started by SIGINT, SIGTERM (shutdown_signals); any other signal is forwarded to the main process.
  1. stop app                SIGTERM, until the deadline           [0s – 29.75s]
  post_stop                  -
  SIGKILL                    to every process still running        [29.75s]
  Stop timeouts claim nothing: each stop may use whatever is left of the grace period.
  Kill time 29.75s: SIGKILL to what still runs, 250ms before the grace period ends,
  so that PID 1 need not step in (at 30s it kills everything and exits 137). Hooks end 1s before the kill.
"""


def test_webapp_plan_with_hooks() -> None:
    path = str(EXAMPLES / "webapp.yaml")
    assert render_plan(load_config(path, {}), HOOKS) == WEBAPP_PLAN.format(path=path)


def test_webapp_plan_without_hooks() -> None:
    path = str(EXAMPLES / "webapp.yaml")
    assert render_plan(load_config(path, {}), {}) == WEBAPP_PLAN_NO_HOOKS.format(path=path)


def test_webapp_ports_follow_the_environment() -> None:
    config = load_config(str(EXAMPLES / "webapp.yaml"), {"WEBAPP_PORT": "18080", "METRICS_PORT": "19100"})
    plan = render_plan(config, {})
    assert "GET http://127.0.0.1:18080/ answers 2xx/3xx" in plan
    assert "127.0.0.1:19100 accepts connections" in plan


def test_reference_documents_every_key_and_is_valid() -> None:
    path = EXAMPLES / "reference.yaml"
    config = load_config(str(path), {})
    assert budget_problems(config) == []
    text = path.read_text()
    keys = {*TOP_LEVEL_KEYS, *PROCESS_KEYS, *READY_KINDS, "timeout", "interval", "format", "level"}
    keys |= {"initial", "max", "max_restarts", "window", "drop", "keep", "hook_timeout"}
    for key in sorted(keys):
        assert f"{key}:" in text, f"reference.yaml does not mention {key}"
    (_, controller) = config.processes
    assert controller.main and controller.capabilities is not None


def test_minimal_plan() -> None:
    path = str(EXAMPLES / "minimal.yaml")
    assert render_plan(load_config(path, {}), {}) == MINIMAL_PLAN.format(path=path)


def test_plan_shows_overruns_and_every_ready_kind(load: Load) -> None:
    config = load(
        """
        grace_period: 10s
        processes:
          - {name: a, command: x, ready: {exec: "pg_isready -h 'db host'"}, stop_timeout: 8s}
          - {name: b, command: x, depends_on: [a], ready: {after: 1.5s}, stop_timeout: 6s}
          - {name: c, command: x, depends_on: [b], ready: {file: /tmp/ok, timeout: 2m}}
          - {name: d, command: x, depends_on: [c], ready: {socket: /run/s}, stop_signal: QUIT}
        """
    )
    plan = render_plan(config, {})
    assert "ready when `pg_isready -h 'db host'` exits 0 (within 60s)" in plan
    assert "after a; ready 1.5s after start" in plan
    assert "after b; ready when file /tmp/ok exists (within 2m)" in plan
    assert "after c; ready when socket /run/s accepts connections (within 60s)" in plan
    assert "  1. stop d                  SIGQUIT, until the deadline           [0s – 9.75s]" in plan
    assert "  3. stop b                  SIGTERM, up to 6s                     [0s – 6s]" in plan
    assert (
        "  4. stop a                  SIGTERM, up to 8s                     [6s – 14s]  exceeds the grace period"
    ) in plan
    assert "Stop timeouts claim 14s, 4s more than the grace period." in plan


def test_plan_hides_passwords_in_urls(load: Load) -> None:
    config = load("processes: [{name: a, command: x, ready: {http: 'https://u:s3cret@h:8443/ok'}}]")
    plan = render_plan(config, {})
    assert "ready when GET https://u:***@h:8443/ok answers 2xx/3xx (within 60s)" in plan
    assert "s3cret" not in plan


def test_plan_without_a_file_or_processes() -> None:
    plan = render_plan(Config(), {})
    assert plan.startswith("Configuration is valid.\n")
    assert "  (no processes)" in plan and "  (no processes to stop)" in plan


def test_plan_for_a_hand_made_config() -> None:
    config = Config(
        processes=(
            ProcessSpec(name="db", command=("x",), ready=ReadyCheck("tcp", "127.0.0.1:5432")),
            ProcessSpec(name="app", command=("y",), depends_on=("db",), main=True, stop_timeout=0.5),
        ),
        grace_period=2.0,
    )
    plan = render_plan(config, {})
    assert "Shutdown plan (grace period 2s)" in plan
    assert "Kill time 1.9s: SIGKILL to what still runs, 100ms before the grace period ends," in plan
    assert "Hooks end 200ms before the kill." in plan
    assert "  1. stop app                SIGTERM, up to 500ms                  [0s – 500ms]" in plan


def test_wind_down_sits_beside_pre_stop_and_the_stops_wait_for_it() -> None:
    path = EXAMPLES / "webapp.yaml"
    plan = render_plan(load_config(path, {}), {"wind_down": ["libvirt"]})
    # No pre_stop: the stops still wait until wind_down is over.
    assert "  wind_down                  libvirt                               [from 0s]\n" in plan
    assert "  1. stop worker             SIGTERM, up to 3s                     [wind_down end +0s – +3s]\n" in plan
    assert "pre_stop" not in plan
    assert "Event hooks" not in plan


def test_plan_has_no_placeholders_and_drains_only_where_a_plugin_says(load: Load) -> None:
    """No undefined "D", and "until drained" only from a plugin that drains."""
    config = load("processes: [{name: a, command: x, stop_timeout: 2s}]")
    plan = render_plan(config, {"pre_stop": ["sleep (sleep 1s)"]})
    assert not re.search(r"\bD\b", plan)
    assert "drained" not in plan
    assert "  1. stop a                  SIGTERM, up to 2s                     [pre_stop end +0s – +2s]" in plan
    plan = render_plan(config, {"pre_stop": ["kubernetes (until drained: no EndpointSlice routes here)"]})
    assert "pre_stop                   kubernetes (until drained: no EndpointSlice routes here)" in plan
    # One kill time, explained once.
    assert plan.count("29.75s") == 2 and "SIGKILL escalation" not in plan
