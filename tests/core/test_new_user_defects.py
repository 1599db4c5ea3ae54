"""What a new user hit on a fresh clone (issue 22's defects), each through the
real CLI, with the supervisor as PID 1 of a PID namespace where the
behaviour is at run time."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from tests.control._ctl import ctl, one_line_error, row, status, wait_status, write_config
from tests.pid1 import Supervisor, run

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


# -- 1, 2: the grace period's bounds ---------------------------------------------


@pytest.mark.parametrize("value", ["99999999999", "0", "500ms", "25h"])
def test_grace_period_out_of_range_is_a_usage_error(value: str) -> None:
    status_code, sup = run(["--grace-period", value, "--", "true"])
    assert status_code == 2, sup.output
    assert len(sup.stderr_lines) == 1 and "Traceback" not in sup.output, sup.output
    assert "out of range: use 1s to 24h" in sup.stderr_lines[0]


@pytest.mark.parametrize("value", ["99999999999", "0"])
def test_grace_period_out_of_range_in_the_file(tmp_path: Path, value: str) -> None:
    path = write_config(tmp_path, f"grace_period: {value}\nprocesses: [{{name: a, command: [true], main: true}}]\n")
    status_code, sup = run(["-c", path])
    assert status_code == 2, sup.output
    assert sup.stderr_lines == [
        f"{path}:1:15: grace_period: grace period {'0s' if value == '0' else '99999999999s'} is out of range: "
        "use 1s to 24h (PID 1 kills everything when it is over)"
    ]
    result = ctl(None, "check", "-c", path)
    assert result.returncode == 2 and result.stderr.startswith(f"{path}:1:15: "), result


def test_the_shortest_grace_period_and_a_clean_exit_is_0() -> None:
    status_code, sup = run(["--grace-period", "1s", "--", "true"])
    assert status_code == 0, sup.output
    assert "over: SIGKILL" not in sup.output


def test_a_large_grace_period_still_ends_with_the_signal_status() -> None:
    # 24 h fits PID 1's timed wait: SIGTERM gives 143, no traceback.
    with Supervisor(["--grace-period", "24h", "--", "sh", "-c", "echo up; exec sleep 60"]) as sup:
        sup.wait_for("^up$", stream="stdout")
        sup.signal(signal.SIGTERM)
        assert sup.wait() == 143, sup.output
    assert "Traceback" not in sup.output


# -- 3, 5: on_failure: ignore and a readiness timeout ----------------------------


def _ignored_helper_pod(tmp_path: Path, ready: Path) -> str:
    """``helper`` (on_failure: ignore) is ready once ``ready`` exists, within 1 s."""
    return write_config(
        tmp_path,
        f"""
        grace_period: 5s
        processes:
          - name: helper
            command: [sleep, "60"]
            ready: {{file: {ready}, timeout: 1s}}
            on_failure: ignore
          - {{name: app, main: true, command: [sleep, "60"]}}
        """,
    )


def test_ignored_process_not_ready_in_time_leaves_the_pod_up_and_alive(tmp_path: Path) -> None:
    with Supervisor(["-c", _ignored_helper_pod(tmp_path, tmp_path / "never")]) as sup:
        sup.wait_for(r"helper failed: not ready within 1s .*; leaving it failed \(on_failure: ignore\)")
        answer = wait_status(sup, lambda a: row(a, "helper")["state"] == "failed")
        assert row(answer, "app")["state"] == "running"
        # The pod goes on without it, as `ignore` promises: alive and ready.
        assert answer["alive"] and answer["ready"], answer
        assert ctl(sup, "health", "--level", "alive").returncode == 0
        assert ctl(sup, "health", "--level", "ready").returncode == 0
        sup.signal(signal.SIGTERM)
        assert sup.wait() == 143, sup.output
    assert "on_failure: shutdown" not in sup.output
    assert "exit status 70" not in sup.output


def test_shutdown_policy_names_itself_when_not_ready(tmp_path: Path) -> None:
    path = write_config(
        tmp_path,
        f"""
        grace_period: 5s
        processes:
          - {{name: helper, command: [sleep, "60"], ready: {{file: {tmp_path}/never, timeout: 1s}}}}
          - {{name: app, main: true, depends_on: [helper], command: [sleep, "60"]}}
        """,
    )
    status_code, sup = run(["-c", path])
    assert status_code == 70, sup.output
    assert "start-up failed: helper not ready within 1s" in sup.output
    assert "shutting down (on_failure: shutdown)" in sup.output


# -- 4: a restart whose readiness times out ---------------------------------------


def test_restart_not_ready_in_time_ends_failed_and_start_works_again(tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    ready.touch()
    with Supervisor(["-c", _ignored_helper_pod(tmp_path, ready)]) as sup:
        wait_status(sup, lambda a: row(a, "helper")["state"] == "running")
        ready.unlink()
        result = ctl(sup, "restart", "helper")
        assert "helper did not start: not ready within 1s" in one_line_error(result)
        failed = row(wait_status(sup, lambda a: row(a, "helper")["state"] == "failed"), "helper")
        assert failed["pid"] is None and failed["readiness"] == "-"
        ready.touch()
        result = ctl(sup, "start", "helper")
        assert result.returncode == 0, result.stderr
        assert row(status(sup), "helper")["state"] == "running"


# -- 7, 8: plans and timelines show what runs ---------------------------------------


def test_check_shows_only_the_hooks_that_will_act() -> None:
    result = ctl(None, "check", "--no-compile", "-c", str(EXAMPLES / "demo.yaml"))
    assert result.returncode == 0, result.stderr
    plan = result.stdout
    assert "exec" not in plan.replace("post_stop                  exec (cleanup)", "")
    assert "  pre_stop                   sleep (sleep 1s)" in plan
    assert "until drained" not in plan


def test_check_shows_libvirt_only_before_the_process_it_acts_on() -> None:
    result = ctl(None, "check", "--no-compile", "-c", str(EXAMPLES / "libvirt" / "pod.yaml"))
    assert result.returncode == 0, result.stderr
    rows = result.stdout.splitlines()
    (hook,) = [i for i, line in enumerate(rows) if "libvirt (shut the guests down)" in line]
    assert rows[hook].lstrip().startswith("before_process_stop") and "stop libvirtd" in rows[hook - 1], rows


def test_one_exec_command_is_one_timeline_row_and_no_wall_row(tmp_path: Path) -> None:
    path = write_config(
        tmp_path,
        """
        grace_period: 5s
        plugins:
          exec:
            commands:
              - {phase: post_stop, name: cleanup, command: [true]}
        processes:
          - {name: app, main: true, command: [true]}
        """,
    )
    status_code, sup = run(["-c", path])
    assert status_code == 0, sup.output
    post_stop = [line for line in sup.stderr_lines if "post_stop " in line]
    assert len(post_stop) == 1 and "exec: cleanup" in post_stop[0], sup.output
    assert "wall: PID 1 kills what is left" not in sup.output
    assert "before the wall at +5.000s, where PID 1 would have killed what was left" in sup.output


# -- 9: the smaller ones ---------------------------------------------------------------


def test_check_grace_period_negative_gives_the_duration_message(tmp_path: Path) -> None:
    path = write_config(tmp_path, "processes: [{name: a, command: [true]}]\n")
    line = one_line_error(ctl(None, "check", "--grace-period", "-1s", "-c", path))
    assert "invalid duration '-1s'" in line


def test_empty_command_is_a_usage_error() -> None:
    status_code, sup = run(["--", ""])
    assert status_code == 2, sup.output
    assert sup.stderr_lines == [
        "supervisor: the command after -- is an empty string: give a program to run (see supervisor --help)"
    ]


def test_bare_port_out_of_range_names_the_range(tmp_path: Path) -> None:
    path = write_config(tmp_path, 'health: {listen: "99999"}\nprocesses: [{name: a, command: [true]}]\n')
    assert one_line_error(ctl(None, "check", "-c", path)).endswith("health.listen: port 99999 is out of range 1-65535")


def test_unknown_dependency_lists_the_other_processes(tmp_path: Path) -> None:
    path = write_config(
        tmp_path,
        "processes:\n  - {name: a, command: [true], depends_on: [b]}\n  - {name: c, stop_signal: TERM}\n",
    )
    result = ctl(None, "check", "-c", path)
    assert "unknown process 'b' (processes: 'c')" in result.stderr, result.stderr
    # Alone in the file (the command after -- is not in it): said in words, not "none".
    path = write_config(tmp_path, "processes:\n  - {name: a, command: [true], depends_on: [b]}\n")
    status_code, sup = run(["-c", path, "--", "true"])
    assert status_code == 2
    assert sup.stderr_lines[0].endswith("unknown process 'b' (no other process is configured in this file)")


def test_skipped_pre_stop_row_reads_once(tmp_path: Path) -> None:
    path = write_config(
        tmp_path,
        "grace_period: 5s\nplugins: {sleep: {seconds: 1s}}\nprocesses: [{name: app, main: true, command: [true]}]\n",
    )
    status_code, sup = run(["-c", path])
    assert status_code == 0, sup.output
    (line,) = [line for line in sup.stderr_lines if " pre_stop " in line]
    assert "hooks not run  skipped (the main process has already exited" in line
    assert "skipped  skipped" not in sup.output


def test_status_names_pid_1_and_nothing_is_left_behind(tmp_path: Path) -> None:
    with Supervisor(["--control", "--", "sh", "-c", "echo up; exec sleep 60"]) as sup:
        sup.wait_for("^up$", stream="stdout")
        answer = wait_status(sup, lambda a: True)
        assert answer["supervisor"]["pid"] == 1 and answer["supervisor"]["orchestrator_pid"] == 2
        assert ctl(sup, "status").stdout.startswith("supervisor ")
        assert " (pid 1), " in ctl(sup, "status").stdout
        assert os.path.exists(sup.socket + ".lock")
        sup.signal(signal.SIGTERM)
        assert sup.wait() == 143
        assert not os.path.exists(sup.socket) and not os.path.exists(sup.socket + ".lock")


def test_no_processes_says_so_and_no_main_ends_with_a_status_line(tmp_path: Path) -> None:
    path = write_config(tmp_path, "processes: []\n")
    with Supervisor(["-c", path]) as sup:
        sup.wait_for("no processes to run: waiting for SIGTERM")
        sup.signal(signal.SIGTERM)
        assert sup.wait() == 0
    assert "exiting with status 0 (no main process; received SIGTERM)" in sup.output


# -- 10: docs that agree with the program ------------------------------------------------

ROOT = EXAMPLES.parent


def test_readme_names_what_make_demo_runs_and_what_suffices() -> None:
    readme = (ROOT / "README.md").read_text()
    demo = (ROOT / "examples" / "demo.sh").read_text()
    assert "CONFIG=${DEMO_CONFIG:-examples/demo.yaml}" in demo
    quick_start = readme.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    assert "make demo   # runs the supervisor as PID 1 of a new PID namespace on examples/demo.yaml" in quick_start
    assert "Use it by hand after `make demo`" in quick_start


def test_readme_timeline_has_the_rows_a_run_prints(tmp_path: Path) -> None:
    """The example's rows are what a run of the demo's shape prints: one row
    per hook or stop, no row for the wall, and the closing lines."""
    readme = (ROOT / "README.md").read_text()
    example = readme.split("shutdown timeline (received SIGTERM;", 1)[1].split("```", 1)[0].splitlines()[1:]
    labels = [" ".join(line.split()[3:5]) for line in example if line.startswith("  +")]
    assert labels == ["pre_stop sleep:", "stop metrics", "stop worker", "stop web", "post_stop exec:"]
    assert example[-2].startswith("  done ") and example[-1].startswith("exiting with status 0")
    path = write_config(
        tmp_path,
        """
        grace_period: 15s
        plugins:
          sleep: {seconds: 100ms}
          exec: {commands: [{phase: post_stop, name: cleanup, command: [true]}]}
        processes:
          - {name: web, main: true, command: [sh, -c, "echo up; exec sleep 60"]}
          - {name: worker, command: [sleep, "60"], depends_on: [web], stop_timeout: 3s}
          - {name: metrics, command: [sleep, "60"], depends_on: [web], stop_timeout: 3s}
        """,
    )
    with Supervisor(["-c", path]) as sup:
        wait_status(sup, lambda a: all(p["state"] == "running" for p in a["processes"]))
        sup.signal(signal.SIGTERM)
        assert sup.wait() == 143, sup.output
    rows = [line.split("]   +", 1)[1] for line in sup.stderr_lines if "]   +" in line]
    ran = sorted(" ".join(row.split()[2:4]) for row in rows)
    assert ran == sorted(labels), sup.output
    assert any("  done " in line and "before the wall at +15.000s" in line for line in sup.stderr_lines)


def test_docs_document_what_the_program_does() -> None:
    configuration = (ROOT / "docs" / "configuration.md").read_text()
    for form in ("${VAR}", "${VAR:-default}", "${VAR-default}", "${VAR:?message}", "${VAR?message}"):
        assert f"`{form}`" in configuration, form
    on_failure = next(line for line in configuration.splitlines() if line.startswith("| `on_failure` |"))
    assert "readiness check that did not pass within its `timeout`" in on_failure
    control = (ROOT / "docs" / "control.md").read_text()
    from supervisor.control.protocol import COMMANDS

    table = control.split("## Commands", 1)[1].split("\n\n", 2)[1]
    for command in COMMANDS:
        assert f"`supervisor {command}" in table, command
    assert "`supervisor check` lists every check, the listener and the socket." not in control
