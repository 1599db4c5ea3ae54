"""Daily use through the real CLI, against the supervisor as PID 1 of a PID
namespace: a command line that explains itself (help, did-you-mean,
completion), logs a person can read, ``status NAME``, colour only on a
terminal, and ``check --effective``."""

from __future__ import annotations

import datetime
import json
import os
import pty
import re
import subprocess
import time
from pathlib import Path

import yaml

from supervisor._cliparse import subcommands
from supervisor.cli import command_parser
from tests.control._ctl import ctl, one_line_error, row, status, wait_status, write_config
from tests.pid1 import BIN, Supervisor, run, shell_wait


def _pod(tmp_path: Path) -> str:
    go = tmp_path / "go"
    return write_config(
        tmp_path,
        f"""
        grace_period: 5s
        processes:
          - name: worker
            command: [sh, -c, "echo early; echo oops >&2; {shell_wait(f"[ -e {go} ]")}; echo late; exec sleep 60"]
          - name: app
            main: true
            command: [sleep, "60"]
        """,
    )


def _logs(sup: Supervisor, *args: str) -> list[str]:
    result = ctl(sup, "logs", *args)
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


# -- a command line that explains itself ------------------------------------------------


def test_help_lists_every_command_with_one_line() -> None:
    status_code, sup = run(["--help"], pid1=False)
    assert status_code == 0, sup.output
    text = "\n".join(sup.stdout_lines)
    commands = text.split("commands (", 1)[1].split("\n\n", 1)[0].splitlines()[1:]
    described = {line.split()[0]: line.split(None, 1)[1] for line in commands}
    control = {"status", "start", "stop", "restart", "signal", "logs", "health"}
    # Own, control and a plugin's (libvirt's) subcommands, each with its line.
    assert {"run", "check", "plugins", "help", "completion", "libvirt"} | control <= set(described), text
    assert all(len(line) > 10 for line in described.values()), described
    assert "--socket PATH" in text and "help COMMAND" in text
    assert "--grace-period DURATION" in text and "Exit status:" in text
    assert "log.level" in text and "log_level" not in text


def test_help_command_explains_one_command() -> None:
    result = ctl(None, "help", "status")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: supervisor status [-h] [--socket PATH] [-o {text,json}] [NAME ...]")
    assert "One row per process" in result.stdout and "a table (default), or the answer as JSON" in result.stdout
    assert "--effective" in ctl(None, "help", "check").stdout
    assert "did you mean 'status'" in one_line_error(ctl(None, "help", "statsu"))
    # Options of the control commands, too (their own stdlib-only parser).
    line = one_line_error(ctl(None, "logs", "--timestmps"))
    assert (
        line
        == "supervisor: unrecognized arguments: --timestmps; did you mean '--timestamps'? (see supervisor logs --help)"
    )


def test_every_argument_of_every_command_says_what_it_is_for() -> None:
    for name, (text, command) in subcommands(command_parser(None)).items():
        assert text, name
        for action in command._actions:
            assert action.help, (name, action.option_strings or action.dest)


def _complete(words: list[str], socket: str) -> list[str]:
    script = ctl(None, "completion", "bash").stdout
    line = " ".join(f"'{word}'" for word in words)
    program = (
        f'{script}\nCOMP_WORDS=({line}); COMP_CWORD={len(words) - 1}; _supervisor; printf "%s\\n" "${{COMPREPLY[@]}}"'
    )
    result = subprocess.run(
        ["bash", "-c", program],
        capture_output=True,
        text=True,
        env={**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}", "SUPERVISOR_SOCKET": socket},
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return [word for word in result.stdout.splitlines() if word]


def test_completion_from_the_parser_and_names_from_the_socket(tmp_path: Path) -> None:
    with Supervisor(["-c", _pod(tmp_path)]) as sup:
        wait_status(sup, lambda a: row(a, "worker")["state"] == "running")
        assert _complete(["supervisor", "sta"], sup.socket) == ["status", "start"]
        assert _complete(["supervisor", "logs", "--ti"], sup.socket) == ["--timestamps"]
        assert _complete(["supervisor", "stop", "wo"], sup.socket) == ["worker"]
        assert _complete(["supervisor", "status", "-o", ""], sup.socket) == ["text", "json"]
        assert _complete(["supervisor", "help", "comp"], sup.socket) == ["completion"]
    # No supervisor to ask: no names, and no error in the command line.
    assert _complete(["supervisor", "stop", ""], sup.socket) == []
    zsh = ctl(None, "completion", "zsh").stdout
    assert zsh.startswith("autoload -U +X compinit") and "bashcompinit" in zsh and "_supervisor()" in zsh


# -- logs a person can read ------------------------------------------------------------


def test_logs_with_timestamps_since_and_json(tmp_path: Path) -> None:
    with Supervisor(["-c", _pod(tmp_path)]) as sup:
        wait_status(sup, lambda a: "early" in ctl(sup, "logs", "worker").stdout and "oops" in ctl(sup, "logs").stdout)
        between = time.time()
        (tmp_path / "go").touch()
        sup.wait_for("^late$", stream="stdout")
        wait_status(sup, lambda a: "late" in ctl(sup, "logs", "worker").stdout)
        # Plain by default: the lines as written (stdout and stderr are two
        # pipes: which of the first two came first is the kernel's business).
        plain = _logs(sup, "worker")
        assert sorted(plain[:2]) == ["early", "oops"] and plain[2] == "late", plain
        stamped = sorted(_logs(sup, "worker", "-t"), key=lambda line: line.split()[-1])
        stamp = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"
        assert re.fullmatch(stamp + r" stdout early", stamped[0]), stamped
        assert re.fullmatch(stamp + r" stderr oops", stamped[2]), stamped
        first = datetime.datetime.strptime(stamped[0][:23], "%Y-%m-%dT%H:%M:%S.%f").replace(tzinfo=datetime.UTC)
        assert abs(first.timestamp() - between) < 60
        # --since: a time, or a duration ago.
        iso = datetime.datetime.fromtimestamp(between, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        assert _logs(sup, "worker", "--since", iso) == ["late"]
        assert sorted(_logs(sup, "worker", "--since", "1h")) == ["early", "late", "oops"]
        assert "invalid --since 'yesterday'" in one_line_error(ctl(sup, "logs", "--since", "yesterday"))
        # -o json: one object per line, with what the socket carries.
        records = [json.loads(line) for line in _logs(sup, "-o", "json", "-n", "100")]
        assert {(r["process"], r["stream"], r["line"]) for r in records} == {
            ("worker", "stdout", "early"),
            ("worker", "stderr", "oops"),
            ("worker", "stdout", "late"),
        }
        assert all(isinstance(r["time"], float) for r in records)


def test_status_of_some_processes(tmp_path: Path) -> None:
    with Supervisor(["-c", _pod(tmp_path)]) as sup:
        wait_status(sup, lambda a: row(a, "worker")["state"] == "running")
        result = ctl(sup, "status", "worker", "-o", "json")
        assert [p["name"] for p in json.loads(result.stdout)["processes"]] == ["worker"]
        rows = ctl(sup, "status", "worker").stdout.splitlines()
        assert rows[1].startswith("NAME") and rows[2].startswith("worker ") and len(rows) == 3, rows
        assert "unknown process 'nope' (processes: worker, app)" in one_line_error(ctl(sup, "status", "nope"))
        assert len(status(sup)["processes"]) == 2


def _on_a_terminal(sup: Supervisor, *args: str, env: dict[str, str] | None = None) -> str:
    """Run ``supervisor ARGS`` with stdout on a pseudo-terminal; its output."""
    main, secondary = pty.openpty()
    try:
        result = subprocess.run(
            [str(BIN / "supervisor"), *args],
            stdout=secondary,
            stderr=subprocess.PIPE,
            env={
                **{k: v for k, v in os.environ.items() if k != "NO_COLOR"},
                "SUPERVISOR_SOCKET": sup.socket,
                **(env or {}),
            },
            timeout=30,
            check=False,
        )
        os.close(secondary)
        secondary = -1
        assert result.returncode == 0, result.stderr
        chunks = []
        while True:
            try:
                chunk = os.read(main, 65536)
            except OSError:  # EIO: the writer is gone and everything is read
                break
            if not chunk:
                break
            chunks.append(chunk)
        return b"".join(chunks).decode()
    finally:
        os.close(main)
        if secondary >= 0:
            os.close(secondary)


def test_colour_only_on_a_terminal_and_never_with_no_color(tmp_path: Path) -> None:
    with Supervisor(["-c", _pod(tmp_path)]) as sup:
        wait_status(sup, lambda a: row(a, "worker")["state"] == "running")
        assert "\033[32mrunning" in _on_a_terminal(sup, "status")
        assert "\033[" in _on_a_terminal(sup, "logs", "-t")
        assert "\033[" not in _on_a_terminal(sup, "status", env={"NO_COLOR": "1"})
        assert "\033[" not in ctl(sup, "status").stdout  # a pipe


# -- plans a person can read -------------------------------------------------------------


def test_check_effective_fills_defaults_expands_and_masks(tmp_path: Path) -> None:
    path = write_config(
        tmp_path,
        """
        plugins:
          http:
            requests:
              - {phase: pre_stop, url: "http://ops:hunter2@127.0.0.1:9/drain"}
        processes:
          - name: db
            command: postgres -D ${PGDATA:-/data}
            env: {DB_PASSWORD: hunter2, MODE: "${MODE-prod}"}
            ready: {tcp: "127.0.0.1:5432"}
          - {name: app, main: true, command: [app], depends_on: [db]}
        """,
    )
    result = subprocess.run(
        [str(BIN / "supervisor"), "check", "--effective", "-c", path],
        capture_output=True,
        text=True,
        env={**os.environ, "PGDATA": "/srv/pg"},
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "hunter2" not in result.stdout
    effective = yaml.safe_load(result.stdout)
    assert effective["grace_period"] == "30s" and effective["log"] == {"format": "text", "level": "info"}
    db = effective["processes"][0]
    assert db["command"] == ["postgres", "-D", "/srv/pg"]
    assert db["env"] == {"DB_PASSWORD": "***", "MODE": "prod"}
    assert db["restart"] == "never" and db["stop_signal"] == "SIGTERM" and db["backoff"]["max_restarts"] == 5
    assert db["ready"] == {"tcp": "127.0.0.1:5432", "timeout": "60s", "interval": "100ms"}
    assert effective["plugins"]["http"]["requests"][0]["url"] == "http://ops:***@127.0.0.1:9/drain"
    # What it prints is a configuration the supervisor reads back as it is.
    again = tmp_path / "effective.yaml"
    again.write_text(result.stdout)
    second = ctl(None, "check", "--effective", "-c", str(again))
    assert second.returncode == 0, second.stderr
    assert second.stdout.splitlines()[1:] == result.stdout.splitlines()[1:]
