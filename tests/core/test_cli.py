"""The command-line contract: every mistake is one line and exit 2."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from supervisor import __version__
from tests.pid1 import run

BAD_INVOCATIONS = [
    (["--grace-period", "abc", "--", "true"], "invalid duration 'abc'"),
    (["--grace-period=-5s", "--", "true"], "invalid duration '-5s'"),
    (["--grace-period", "--", "true"], "--grace-period: expected one argument"),
    (["--rewrite", "FOO:TERM", "--", "true"], "unknown signal 'FOO'"),
    (["--rewrite", "TERM", "--", "true"], "invalid rewrite 'TERM': use FROM:TO"),
    (["--rewrite", "TERM:99", "--", "true"], "invalid signal number 99"),
    (["--rewrite", "0:TERM", "--", "true"], "invalid signal number 0"),
    (["--log-format", "xml", "--", "true"], "invalid choice: 'xml'"),
    (["--bogus", "--", "true"], "unrecognized arguments: --bogus"),
    ([], "nothing to run"),
    (["run"], "nothing to run"),
    (["-c", "/no/such/file.yaml"], "/no/such/file.yaml"),
    (["check"], "check needs a configuration"),
    (["frobnicate"], "unknown command 'frobnicate' (commands: run, check, plugins, help, completion, status,"),
    (["statu"], "unknown command 'statu'; did you mean 'status' or 'start'?"),
    (
        ["--grase-period", "5s", "--", "true"],
        "unrecognized arguments: --grase-period 5s; did you mean '--grace-period'?",
    ),
    (["check", "--grace-period", "-1s"], "invalid duration '-1s'"),
]


@pytest.mark.parametrize(
    ("args", "message"), BAD_INVOCATIONS, ids=[" ".join(a) or "(none)" for a, _ in BAD_INVOCATIONS]
)
def test_bad_input_is_one_clear_line_and_exit_2(args: list[str], message: str) -> None:
    status, sup = run(args)
    assert status == 2, sup.output
    assert len(sup.stderr_lines) == 1, sup.output
    assert message in sup.stderr_lines[0]
    assert "Traceback" not in sup.output
    assert sup.stdout_lines == []


def test_version_and_help() -> None:
    status, sup = run(["--version"], pid1=False)
    assert status == 0
    assert sup.stdout_lines == [f"supervisor (pid1-supervisor) {__version__}"]
    status, sup = run(["--help"], pid1=False)
    assert status == 0
    text = "\n".join(sup.stdout_lines)
    for option in ("--config", "--grace-period", "--rewrite", "--process-group", "--log-format", "--verbose"):
        assert option in text


def test_config_from_environment(tmp_path: Path) -> None:
    config = tmp_path / "deploy.yaml"
    config.write_text("processes:\n  - {name: app, main: true, command: [sh, -c, 'exit 4']}\n")
    status, sup = run([], env={"SUPERVISOR_CONFIG": str(config)})
    assert status == 4, sup.output


def test_command_and_main_in_file_conflict(tmp_path: Path) -> None:
    config = tmp_path / "deploy.yaml"
    config.write_text("processes:\n  - {name: app, main: true, command: [true]}\n")
    status, sup = run(["-c", str(config), "--", "true"])
    assert status == 2
    assert "both a command after -- and a main process ('app'" in sup.stderr_lines[0]


def test_bad_configuration_starts_nothing(tmp_path: Path) -> None:
    marker = tmp_path / "started"
    config = tmp_path / "deploy.yaml"
    config.write_text(
        f"processes:\n  - name: a\n    command: [touch, {marker}]\n"
        "  - name: b\n    command: [true]\n    stop_signal: SIGFOO\n"
    )
    status, sup = run(["-c", str(config), "--", "true"])
    assert status == 2
    assert sup.stderr_lines[0].startswith(f"{config}:6:18: ")
    assert "SIGFOO" in sup.stderr_lines[0]
    assert not marker.exists()


def test_check_prints_a_plan_and_fails_on_budget(tmp_path: Path) -> None:
    config = tmp_path / "deploy.yaml"
    config.write_text(
        "grace_period: 5s\nprocesses:\n"
        "  - {name: db, command: [sleep, '1'], stop_timeout: 4s}\n"
        "  - {name: app, main: true, depends_on: [db], command: [sleep, '1'], stop_timeout: 4s}\n"
    )
    status, sup = run(["check", "-c", str(config)], pid1=False)
    assert status == 2
    assert sup.stderr_lines[0].startswith(f"{config}:1:")
    status, sup = run(["check", "-c", str(config), "--grace-period", "10s"], pid1=False)
    assert status == 0, sup.output
    text = "\n".join(sup.stdout_lines)
    assert text.index("db") < text.index("app")  # start order
    stop_part = text[text.index("Shutdown") :]
    assert stop_part.index("app") < stop_part.index("db")  # stop order


def test_the_main_process_can_start_before_trio_is_imported() -> None:
    # `supervisor -- COMMAND` spawns COMMAND before importing trio (~70 ms);
    # everything on that path must stay free of it.
    code = (
        "import sys, supervisor._run as c\n"
        "from supervisor.pid1.options import parse_run_args\n"
        "config = c.build_config(parse_run_args(['--', 'true']))\n"
        "hooks = c._load_plugins(config)\n"
        "import supervisor.runtime.spawn\n"
        "print(sorted(m for m in ('trio', 'yaml', 'pluggy') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
