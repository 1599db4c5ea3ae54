"""The container's stop signal starts the plan, whichever it is: an image
whose STOPSIGNAL is SIGQUIT (nginx, php-fpm) gets its whole shutdown plan
on QUIT when the configuration says so, and QUIT is forwarded otherwise."""

from __future__ import annotations

import re
import signal
import sys
import textwrap
from pathlib import Path

from tests.control._ctl import ctl
from tests.core.children import SIGNAL_REPORTER
from tests.pid1 import Supervisor, run

PY = sys.executable
# Quits at once on SIGQUIT, as nginx does: a forwarded QUIT leaves no drain.
QUITS_ON_QUIT = SIGNAL_REPORTER.replace("if signo == signal.SIGTERM:", "if signo in (signal.SIGTERM, signal.SIGQUIT):")


def _config(tmp_path: Path, extra: str = "") -> str:
    marker = tmp_path / "drained"
    program = tmp_path / "web.py"
    program.write_text(QUITS_ON_QUIT)
    path = tmp_path / "deploy.yaml"
    path.write_text(
        textwrap.dedent(
            f"""
            grace_period: 20s
            {extra}
            plugins:
              exec:
                commands:
                  - {{phase: pre_stop, name: drain, command: ["sh", "-c", "echo drained > {marker}"]}}
            processes:
              - name: web
                main: true
                command: ["{PY}", "{program}"]
            """
        )
    )
    return str(path)


def test_quit_runs_the_whole_plan_when_configured(tmp_path: Path) -> None:
    config = _config(tmp_path, "shutdown_signals: [QUIT, TERM]")
    with Supervisor(["-c", config]) as sup:
        sup.wait_for("^ready$", stream="stdout")
        sup.signal(signal.SIGQUIT)
        assert sup.wait() == 0, sup.output
    # The main process got its own stop signal from the plan, not the QUIT.
    assert [line for line in sup.stdout_lines if line.startswith("got")] == [f"got {int(signal.SIGTERM)}"]
    assert (tmp_path / "drained").read_text() == "drained\n"
    assert "shutdown timeline (received SIGQUIT" in sup.output
    assert "pre_stop" in sup.output and "drain" in sup.output


def test_quit_is_forwarded_without_the_setting(tmp_path: Path) -> None:
    with Supervisor(["-c", _config(tmp_path)]) as sup:
        sup.wait_for("^ready$", stream="stdout")
        sup.signal(signal.SIGQUIT)
        assert sup.wait() == 0, sup.output
    assert [line for line in sup.stdout_lines if line.startswith("got")] == [f"got {int(signal.SIGQUIT)}"]
    assert re.search(r"pre_stop .* skipped \(the main process has already exited", sup.output), sup.output


def test_the_command_line_sets_them_without_a_configuration() -> None:
    with Supervisor(["--shutdown-signals", "QUIT", "--", PY, "-c", QUITS_ON_QUIT]) as sup:
        sup.wait_for("^ready$", stream="stdout")
        sup.signal(signal.SIGTERM)  # no longer a stop signal: forwarded
        sup.wait_for(f"^got {int(signal.SIGTERM)}$", stream="stdout")
        assert sup.wait() == 0
    with Supervisor(["--shutdown-signals", "QUIT", "--", PY, "-c", SIGNAL_REPORTER]) as sup:
        sup.wait_for("^ready$", stream="stdout")
        sup.signal(signal.SIGQUIT)  # the stop: the main process gets its SIGTERM
        assert sup.wait() == 0
    assert [line for line in sup.stdout_lines if line.startswith("got")] == [f"got {int(signal.SIGTERM)}"]


def test_a_bad_entry_is_reported_at_its_position(tmp_path: Path) -> None:
    config = tmp_path / "deploy.yaml"
    config.write_text("shutdown_signals: [QUIT, KILL]\nprocesses: [{name: a, main: true, command: 'true'}]\n")
    status, sup = run(["-c", str(config)], pid1=False)
    assert status == 2
    assert sup.stderr_lines == [
        f"{config}:1:26: shutdown_signals[1]: SIGKILL cannot start the shutdown: PID 1 never acts on it"
    ]


def test_check_shows_which_signals_start_the_plan(tmp_path: Path) -> None:
    status, sup = run(["check", "-c", _config(tmp_path, "shutdown_signals: QUIT")], pid1=False)
    assert status == 0, sup.output
    assert "  Started by SIGQUIT (shutdown_signals); any other signal is forwarded to the main process." in sup.output


def test_replan_changes_them_in_both_processes(tmp_path: Path) -> None:
    config = Path(_config(tmp_path))
    with Supervisor(["-c", str(config)]) as sup:
        sup.wait_for("^ready$", stream="stdout")
        config.write_text(
            config.read_text().replace("grace_period: 20s", "grace_period: 20s\nshutdown_signals: [QUIT]")
        )
        result = ctl(sup, "replan")
        assert result.returncode == 0, result.stderr
        sup.signal(signal.SIGQUIT)
        assert sup.wait() == 0, sup.output
    assert [line for line in sup.stdout_lines if line.startswith("got")] == [f"got {int(signal.SIGTERM)}"]
    assert "shutdown timeline (received SIGQUIT" in sup.output
