"""Several processes from one YAML file: order, readiness, restarts, stopping."""

from __future__ import annotations

import os
import signal
import textwrap
from pathlib import Path

import pytest

from tests.control._ctl import row, wait_status
from tests.control._ctl import status as control_status
from tests.pid1 import Supervisor, ended_at_the_wall, run, shell_wait


def _write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "deploy.yaml"
    path.write_text(textwrap.dedent(text))
    return str(path)


def _on_term(name: str, log: Path) -> str:
    """A shell command that records its TERM in `log` and exits 0."""
    return f"trap 'echo {name} >> {log}; exit 0' TERM; echo {name} up; while :; do sleep 0.02; done"


def test_start_in_dependency_order_after_readiness_and_stop_in_reverse(tmp_path: Path) -> None:
    stops, go = tmp_path / "stops", tmp_path / "go"
    # db becomes ready only when the test says so, after the supervisor has
    # shown that it holds app back: no race decides the order.
    config = _write(
        tmp_path,
        f"""
        grace_period: 10s
        processes:
          - name: db
            command: ["sh", "-c", "{shell_wait(f"[ -e {go} ]")}; touch {tmp_path}/db-ready; {_on_term("db", stops)}"]
            ready: {{file: {tmp_path}/db-ready, timeout: 60s}}
          - name: cache
            command: ["sh", "-c", "{_on_term("cache", stops)}"]
          - name: app
            depends_on: [db, cache]
            main: true
            command: ["sh", "-c", "test -e {tmp_path}/db-ready && echo saw-db-ready; {_on_term("app", stops)}"]
    """,
    )
    with Supervisor(["-c", config]) as sup:
        answer = wait_status(sup, lambda a: row(a, "cache")["state"] == "running" and row(a, "db")["pid"])
        assert row(answer, "db")["state"] == "starting", answer
        assert row(answer, "app")["state"] == "pending", answer
        go.touch()
        sup.wait_for("^app up$", stream="stdout")
        sup.signal(signal.SIGTERM)
        assert sup.wait() == 0
    assert "saw-db-ready" in sup.stdout_lines
    log = "\n".join(sup.stderr_lines)
    assert log.index("db is ready") < log.index("started app"), log
    order = stops.read_text().split()
    assert order[0] == "app" and sorted(order[1:]) == ["cache", "db"]


def test_dependency_that_never_becomes_ready_fails_the_start(tmp_path: Path) -> None:
    config = _write(
        tmp_path,
        f"""
        processes:
          - name: db
            command: ["sleep", "30"]
            ready: {{file: {tmp_path}/never, timeout: 1s}}
          - name: app
            depends_on: [db]
            main: true
            command: ["sh", "-c", "echo app ran"]
    """,
    )
    status, sup = run(["-c", config])
    assert status == 70
    assert "start-up failed: db not ready within 1s" in sup.output
    assert "app ran" not in sup.stdout_lines


def test_restart_on_failure_with_backoff(tmp_path: Path) -> None:
    counter = tmp_path / "count"
    config = _write(
        tmp_path,
        f"""
        processes:
          - name: flaky
            command: ["sh", "-c", "echo x >> {counter}; [ $(wc -l < {counter}) -ge 3 ] && exec sleep 30; exit 1"]
            restart: on-failure
            backoff: {{initial: 50ms, max: 100ms, max_restarts: 5, window: 60s}}
          - name: app
            main: true
            command: ["sh", "-c", "until [ $(wc -l < {counter} 2>/dev/null || echo 0) -ge 3 ]; do sleep 0.05; done"]
    """,
    )
    status, sup = run(["-c", config])
    assert status == 0, sup.output
    assert counter.read_text().count("x") == 3
    assert sup.output.count("restarting flaky") == 2


def test_restart_never_with_on_failure_ignore_leaves_it_failed(tmp_path: Path) -> None:
    config = _write(
        tmp_path,
        f"""
        processes:
          - name: helper
            command: ["sh", "-c", "touch {tmp_path}/helper-ran; exit 3"]
            on_failure: ignore
          - name: app
            main: true
            # Runs until the test has seen the supervisor carry on without the helper.
            command: ["sh", "-c", "{shell_wait(f"[ -e {tmp_path}/go ]")}; exit 0"]
    """,
    )
    with Supervisor(["-c", config]) as sup:
        sup.wait_for("helper failed: exited: exited with code 3; leaving it failed")
        answer = control_status(sup)
        assert answer["shutdown"] is None, answer
        assert row(answer, "helper")["state"] == "failed", answer
        (tmp_path / "go").touch()
        # Not 70: the helper's failure is not the container's.
        assert sup.wait() == 0, sup.output


def test_restart_always_restarts_clean_exits(tmp_path: Path) -> None:
    counter = tmp_path / "count"
    config = _write(
        tmp_path,
        f"""
        processes:
          - name: ticker
            command: ["sh", "-c", "echo x >> {counter}"]
            restart: always
            backoff: {{initial: 10ms, max: 20ms, max_restarts: 100, window: 60s}}
          - name: app
            main: true
            command: ["sh", "-c", "while [ $(wc -l < {counter} 2>/dev/null || echo 0) -lt 4 ]; do sleep 0.02; done"]
    """,
    )
    status, sup = run(["-c", config])
    assert status == 0, sup.output
    assert counter.read_text().count("x") >= 4


def test_crash_loop_brings_the_container_down_with_70(tmp_path: Path) -> None:
    config = _write(
        tmp_path,
        """
        processes:
          - name: crasher
            command: ["sh", "-c", "exit 9"]
            restart: always
            backoff: {initial: 10ms, max: 20ms, max_restarts: 2, window: 60s}
          - name: app
            main: true
            command: ["sleep", "30"]
    """,
    )
    status, sup = run(["-c", config])
    assert status == 70, sup.output
    assert "crasher failed: exited with code 9; restarted 2 times" in sup.output
    assert "exit status 70" in sup.output


@pytest.mark.parametrize(
    ("grace_period", "stop_timeout"),
    [
        (1.0, 20.0),  # the stop timeout is capped by what remains of the budget
        (30.0, 0.5),  # ...and escalates on its own well before the budget ends
    ],
)
def test_sigkill_comes_at_the_stop_timeout_or_the_deadline_whichever_is_first(
    tmp_path: Path, grace_period: float, stop_timeout: float
) -> None:
    config = _write(
        tmp_path,
        f"""
        grace_period: {grace_period}
        log: {{format: json}}
        processes:
          - name: stubborn
            main: true
            command: ["sh", "-c", "trap '' TERM; echo up; while :; do sleep 0.02; done"]
            stop_timeout: {stop_timeout}
    """,
    )
    with Supervisor(["-c", config]) as sup:
        sup.wait_for("^up$", stream="stdout")
        sup.signal(signal.SIGTERM)
        assert sup.wait() == 137
    if stop_timeout > grace_period and ended_at_the_wall(sup.json_records(), "stop stubborn"):
        return  # the budget's end came first, and PID 1 held it
    timeline = sup.timeline()
    stop = next(s for s in timeline if s["phase"] == "stop")
    # Offsets from the SIGTERM's arrival: the stop signal goes at "start".
    # The SIGKILL never comes early (the deadline's escalation is 5 % of the
    # grace period before the wall: 50 ms of 1 s); a busy machine may be late to kill and reap,
    # but the other limit (0.5 s against 30 s, 20 s against 1 s) is far.
    killed_at = stop["start"] + stop["duration"]
    expected = min(grace_period, stop["start"] + stop_timeout)
    assert expected - 0.06 <= killed_at < expected + 0.5, timeline


def test_configured_stop_signal_is_sent_on_sigterm(tmp_path: Path) -> None:
    config = _write(
        tmp_path,
        """
        processes:
          - name: web
            main: true
            command: ["sh", "-c", "trap 'echo got INT; exit 0' INT; echo up; while :; do sleep 0.02; done"]
            stop_signal: SIGINT
    """,
    )
    with Supervisor(["-c", config]) as sup:
        sup.wait_for("^up$", stream="stdout")
        sup.signal(signal.SIGTERM)
        assert sup.wait() == 0
    assert "got INT" in sup.stdout_lines


def test_log_prefix_and_plain_output(tmp_path: Path) -> None:
    config = _write(
        tmp_path,
        f"""
        processes:
          - name: chatty
            command: ["sh", "-c", "echo hello; echo oops >&2; sleep 30"]
            log_prefix: true
          - name: app
            main: true
            depends_on: [chatty]
            command: ["sh", "-c", "{shell_wait(f"[ -e {tmp_path}/go ]")}; echo plain"]
    """,
    )
    with Supervisor(["-c", config]) as sup:
        sup.wait_for(r"^\[chatty\] hello$", stream="stdout")
        sup.wait_for(r"^\[chatty\] oops$", stream="stderr")
        (tmp_path / "go").touch()  # the app says its line once chatty has said both
        assert sup.wait() == 0, sup.output
    assert "plain" in sup.stdout_lines


def test_command_line_main_with_helpers_from_the_file(tmp_path: Path) -> None:
    config = _write(
        tmp_path,
        f"""
        processes:
          - name: sidecar
            command: ["sh", "-c", "touch {tmp_path}/sidecar-up; exec sleep 30"]
            ready: {{file: {tmp_path}/sidecar-up}}
    """,
    )
    status, sup = run(["-c", config, "--", "sh", "-c", f"test -e {tmp_path}/sidecar-up && exit 5"])
    assert status == 5, sup.output
    assert "stopping sidecar" in sup.output


def test_env_cwd_and_variable_expansion(tmp_path: Path) -> None:
    config = _write(
        tmp_path,
        f"""
        processes:
          - name: app
            main: true
            cwd: {tmp_path}
            env: {{GREETING: "${{GREETING_IN:-hello}} world", LEVEL: "${{LEVEL_IN}}"}}
            command: ["sh", "-c", "echo $GREETING $LEVEL $(pwd)"]
    """,
    )
    status, sup = run(["-c", config], env={"LEVEL_IN": "debug"})
    assert status == 0, sup.output
    assert sup.stdout_lines == [f"hello world debug {tmp_path}"]


@pytest.mark.skipif(os.geteuid() != 0, reason="changing users needs real root")
def test_privileges_are_dropped_before_exec(tmp_path: Path) -> None:
    config = _write(
        tmp_path,
        """
        processes:
          - name: app
            main: true
            user: "65534"
            group: "65534"
            no_new_privs: true
            capabilities: {drop: [all]}
            command: ["sh", "-c", "grep -E '^(Uid|Gid|Groups|NoNewPrivs|CapBnd|CapEff):' /proc/self/status"]
    """,
    )
    status, sup = run(["-c", config], user_namespace=False)
    assert status == 0, sup.output
    fields = {line.split(":")[0]: line.split(":", 1)[1].split() for line in sup.stdout_lines}
    assert fields["Uid"] == ["65534"] * 4
    assert fields["Gid"] == ["65534"] * 4
    assert fields["Groups"] in ([], ["65534"])
    assert fields["NoNewPrivs"] == ["1"]
    assert int(fields["CapBnd"][0], 16) == 0
    assert int(fields["CapEff"][0], 16) == 0
