"""The control socket with the real CLI, the supervisor as PID 1 of a PID
namespace: status rows, start/stop/restart/signal, logs, and every bad input."""

from __future__ import annotations

import os
import queue
import signal
import stat
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.control._ctl import ctl, one_line_error, row, status, wait_status, write_config
from tests.pid1 import SUPERVISOR, Supervisor


def _pod(tmp_path: Path, extra: str = "") -> str:
    counter = tmp_path / "count"
    return write_config(
        tmp_path,
        f"""
        grace_period: 10s
        processes:
          - name: flaky
            # Crashes on its first run only, then stays up.
            command: ["sh", "-c", "echo x >> {counter}; [ $(wc -l < {counter}) -ge 2 ] && exec sleep 60; exit 3"]
            restart: on-failure
            backoff: {{initial: 200ms, max: 200ms}}
          - name: worker
            command: ["sh", "-c", "trap 'echo worker got TERM; exit 0' TERM; while :; do sleep 0.05; done"]
            stop_timeout: 5s
            restart: always
          - name: app
            main: true
            depends_on: [flaky, worker]
            command: ["sh", "-c", "trap 'echo app got HUP' HUP; echo app up; while :; do sleep 0.05; done"]
        {extra}
        """,
    )


def test_status_rows_follow_start_crash_restart_and_stop(tmp_path: Path) -> None:
    with Supervisor(["-c", _pod(tmp_path)]) as sup:
        answer = wait_status(sup, lambda a: all(p["state"] == "running" for p in a["processes"]))
        flaky, worker, app = row(answer, "flaky"), row(answer, "worker"), row(answer, "app")
        # The crash on the first run is in the row: one restart, its exit status.
        assert flaky["restarts"] == 1 and flaky["restarts_in_window"] == 1
        assert flaky["last_exit"] == "exited with code 3" and flaky["exit_code"] == 3  # the crash
        assert app["main"] and app["readiness"] == "ready" and isinstance(app["pid"], int)
        assert worker["uptime"] is not None and answer["ready"] and answer["alive"]
        assert answer["shutdown"] is None

        # stop: its stop signal, then it stays stopped (restart: always notwithstanding).
        result = ctl(sup, "stop", "worker")
        assert result.returncode == 0, result.stderr
        assert "worker stopped (exited with code 0)" in result.stdout
        sup.wait_for("^worker got TERM$", stream="stdout")
        stopped = row(status(sup), "worker")
        assert stopped["state"] == "stopped" and stopped["pid"] is None
        assert stopped["last_exit"] == "exited with code 0" and stopped["exit_code"] == 0
        assert "already stopped" in ctl(sup, "stop", "worker").stdout

        # start: a new run with a new PID.
        result = ctl(sup, "start", "worker")
        assert result.returncode == 0, result.stderr
        assert "worker started (pid" in result.stdout
        started = wait_status(sup, lambda a: row(a, "worker")["state"] == "running")
        assert row(started, "worker")["pid"] not in (None, worker["pid"])

        # restart of a helper leaves the main process alone.
        result = ctl(sup, "restart", "flaky")
        assert result.returncode == 0, result.stderr
        assert result.stdout.startswith("flaky restarted (pid")
        after = status(sup)
        assert row(after, "flaky")["pid"] not in (None, flaky["pid"])
        assert row(after, "app")["pid"] == app["pid"] and row(after, "app")["state"] == "running"

        # The text table has one row per process.
        table = ctl(sup, "status").stdout.splitlines()
        assert table[0].startswith("supervisor ") and "alive, ready" in table[0]
        assert table[1].split()[:3] == ["NAME", "STATE", "PID"]
        assert [line.split()[0] for line in table[2:5]] == ["flaky", "worker", "app"]

        sup.signal(signal.SIGTERM)
        assert sup.wait() == 143
    assert not os.path.exists(sup.socket), "the socket is removed at exit"


def test_signal_and_main_process_rules(tmp_path: Path) -> None:
    with Supervisor(["-c", _pod(tmp_path)]) as sup:
        wait_status(sup, lambda a: row(a, "app")["state"] == "running")
        result = ctl(sup, "signal", "app", "HUP")
        assert result.returncode == 0, result.stderr
        assert "sent SIGHUP to the process group of app" in result.stdout
        sup.wait_for("^app got HUP$", stream="stdout")
        for command in ("restart", "stop"):
            line = one_line_error(ctl(sup, command, "app"))
            assert f"cannot {command} app: it is the main process" in line
        assert row(status(sup), "app")["state"] == "running"


def test_every_bad_request_is_one_clear_line(tmp_path: Path) -> None:
    with Supervisor(["-c", _pod(tmp_path)]) as sup:
        wait_status(sup, lambda a: row(a, "app")["state"] == "running")
        cases = {
            ("stop", "nope"): "supervisor stop: unknown process 'nope' (processes: flaky, worker, app)",
            ("restart", "worker", "nope"): "unknown process 'nope'",
            ("signal", "worker", "FOO"): "supervisor signal: bad signal 'FOO'",
            ("signal", "worker", "99"): "bad signal '99'",
            ("logs", "nope"): "unknown process 'nope'",
        }
        for args, expected in cases.items():
            result = ctl(sup, *args)
            assert result.returncode == 1, (args, result)
            assert expected in one_line_error(result), args
        # Usage mistakes: exit 2, as everywhere in this CLI.
        for args in (("stop",), ("signal", "worker"), ("logs", "-n", "x"), ("status", "-o", "yaml")):
            result = ctl(sup, *args)
            assert result.returncode == 2, (args, result)
            assert one_line_error(result).startswith("supervisor: ")
        stopped = ctl(sup, "stop", "worker")
        assert stopped.returncode == 0
        line = one_line_error(ctl(sup, "signal", "worker", "HUP"))
        assert line == "supervisor signal: worker is not running (stopped): nothing to signal"
    # The supervisor is gone: no socket any more.
    line = one_line_error(ctl(sup, "status"))
    assert line.startswith(f"supervisor status: no control socket at {sup.socket}: is the supervisor running here?")


def test_a_stale_socket_and_a_garbage_request(tmp_path: Path) -> None:
    import socket as sockets

    stale = str(tmp_path / "stale.sock")
    listener = sockets.socket(sockets.AF_UNIX, sockets.SOCK_STREAM)
    listener.bind(stale)
    listener.close()  # the file stays, nobody listens: what a killed supervisor leaves
    line = one_line_error(ctl(None, "status", socket=stale))
    assert "no supervisor is listening on" in line
    with Supervisor(["--control", "--", "sleep", "30"]) as sup:
        wait_status(sup, lambda a: row(a, "sleep")["state"] == "running")
        for request, expected in (
            (b"hello\n", "not JSON"),
            (b"[1]\n", "a request is a JSON object"),
            (b'{"command": "x"}\n', "unknown command 'x'"),
        ):
            client = sockets.socket(sockets.AF_UNIX, sockets.SOCK_STREAM)
            client.connect(sup.socket)
            client.sendall(request)
            answer = client.makefile().readline()
            client.close()
            assert '"ok":false' in answer and expected in answer, answer


def test_logs_keep_a_bounded_ring_per_process_also_without_log_prefix(tmp_path: Path) -> None:
    config = write_config(
        tmp_path,
        """
        control: {log_lines: 5}
        processes:
          - name: chatty
            command: ["sh", "-c", "i=0; while [ $i -lt 50 ]; do i=$((i+1)); echo line $i; done; exec sleep 60"]
          - name: grumpy
            command: ["sh", "-c", "echo oops >&2; exec sleep 60"]
          - name: app
            main: true
            command: ["sh", "-c", "echo app says hi; exec sleep 60"]
        """,
    )
    with Supervisor(["-c", config]) as sup:
        sup.wait_for("^oops$")  # passed on unchanged, to the supervisor's own stderr
        sup.wait_for("^app says hi$", stream="stdout")
        sup.wait_for("^line 50$", stream="stdout")  # no prefix: log_prefix is off
        result = ctl(sup, "logs", "chatty", "-n", "100")
        assert result.returncode == 0, result.stderr
        # At most 5 lines kept: the last ones.
        assert result.stdout.splitlines() == ["line 46", "line 47", "line 48", "line 49", "line 50"]
        assert ctl(sup, "logs", "chatty", "-n", "2").stdout.splitlines() == ["line 49", "line 50"]
        assert ctl(sup, "logs", "grumpy").stdout.splitlines() == ["oops"]  # stderr too
        everything = ctl(sup, "logs", "-n", "100").stdout.splitlines()
        assert "[app] app says hi" in everything and "[grumpy] oops" in everything
        assert len(everything) == 5 + 1 + 1

        follow = subprocess.Popen(
            [SUPERVISOR, "logs", "app", "-f", "-n", "0"],
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "SUPERVISOR_SOCKET": sup.socket},
        )
        try:
            wait_status(sup, lambda a: True)
            ctl(sup, "signal", "app", "TERM")
            sup.wait()
            assert follow.stdout is not None
            # The follow ends when the supervisor does; nothing was printed
            # (no new lines), and the command ends by itself.
            assert follow.wait(10) == 0
        finally:
            follow.kill()


def test_logs_of_a_main_process_started_before_trio(tmp_path: Path) -> None:
    # No dependencies, no plugins: spawned before trio is imported, its
    # pipes made then.
    config = write_config(
        tmp_path,
        """
        processes:
          - name: app
            main: true
            command: ["sh", "-c", "echo early bird; exec sleep 60"]
        """,
    )
    with Supervisor(["-c", config]) as sup:
        sup.wait_for("^early bird$", stream="stdout")
        wait_status(sup, lambda a: row(a, "app")["state"] == "running")
        assert ctl(sup, "logs", "app").stdout.splitlines() == ["early bird"]


def test_the_command_after_dashes_keeps_the_containers_output(tmp_path: Path) -> None:
    with Supervisor(["--control", "--", "sh", "-c", "echo plain; exec sleep 60"]) as sup:
        sup.wait_for("^plain$", stream="stdout")
        wait_status(sup, lambda a: row(a, "sh")["state"] == "running")
        line = one_line_error(ctl(sup, "logs", "sh"))
        assert line.startswith("supervisor logs: sh's output is not captured: it writes to the container's stdout")
        assert ctl(sup, "logs").stdout == ""


def test_status_shows_the_shutdown_and_the_deadline_left(tmp_path: Path) -> None:
    release = tmp_path / "release"
    config = write_config(
        tmp_path,
        f"""
        grace_period: 20s
        processes:
          - name: slow
            main: true
            command:
              - sh
              - -c
              - "trap 'while [ ! -e {release} ]; do sleep 0.05; done; exit 0' TERM; echo up; while :; do sleep 1; done"
        """,
    )
    with Supervisor(["-c", config]) as sup:
        sup.wait_for("^up$", stream="stdout")
        sup.signal(signal.SIGTERM)
        answer = wait_status(sup, lambda a: a["shutdown"] is not None)
        shutdown = answer["shutdown"]
        assert shutdown["reason"] == "received SIGTERM"
        assert shutdown["state"] == "stopping"
        assert 0 < shutdown["deadline_left"] <= 20
        assert shutdown["phase"] == "stop slow"
        assert row(answer, "slow")["state"] == "stopping" and not answer["ready"]
        text = ctl(sup, "status").stdout
        assert "shutting down: received SIGTERM;" in text and "left before SIGKILL" in text
        line = one_line_error(ctl(sup, "start", "slow"))
        assert "cannot start: the supervisor is shutting down (received SIGTERM)" in line
        release.touch()
        assert sup.wait() == 0


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory another user can reach (pytest's tmp_path is private)."""
    path = Path(tempfile.mkdtemp(prefix="sup-shared-"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        for entry in path.iterdir():
            entry.unlink()
        path.rmdir()


NOBODY = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]


def test_the_socket_refuses_a_client_of_another_uid(shared_dir: Path) -> None:
    socket_path = str(shared_dir / "control.sock")
    # Real root inside (no user namespace), so the uids SO_PEERCRED reports
    # are the host's: the supervisor's 0, the client's 65534.
    with Supervisor(
        ["--control", "--", "sleep", "30"], env={"SUPERVISOR_SOCKET": socket_path}, user_namespace=False
    ) as sup:
        wait_status(sup, lambda a: row(a, "sleep")["state"] == "running")
        assert stat.S_IMODE(os.stat(socket_path).st_mode) == 0o600
        line = one_line_error(ctl(sup, "status", prefix=NOBODY))
        assert line == (
            f"supervisor status: permission denied: {socket_path} belongs to uid 0; run as root or as uid 0 "
            "(you are uid 65534)"
        )
        # Even with the file opened up, the peer check refuses the connection.
        os.chmod(socket_path, 0o666)
        line = one_line_error(ctl(sup, "status", prefix=NOBODY))
        assert line == (
            "supervisor status: permission denied: only root and uid 0 may use this socket (you are uid 65534)"
        )
        assert ctl(sup, "health", prefix=NOBODY).returncode == 1
        # Root still gets in.
        assert ctl(sup, "status").returncode == 0
        sup.wait_for("refused a client of uid 65534")


def test_the_client_imports_neither_trio_nor_the_cli_module() -> None:
    """`supervisor status` and `health` (exec probes) start fast: stdlib only."""
    import sys

    code = (
        "import sys\n"
        "sys.argv = ['supervisor', 'health', '--socket', '/nonexistent/control.sock']\n"
        "from supervisor._main import main\n"
        "try:\n    main()\nexcept SystemExit as exc:\n    code = exc.code\n"
        "heavy = [m for m in ('trio', 'pluggy', 'yaml', 'supervisor.cli', 'supervisor.config') if m in sys.modules]\n"
        "print(code, heavy)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout == "1 []\n", result
    assert result.stderr.startswith("supervisor health: no control socket at /nonexistent/control.sock")


def test_logs_follow_prints_new_lines_as_they_come(tmp_path: Path) -> None:
    poke = tmp_path / "poke"
    config = write_config(
        tmp_path,
        f"""
        processes:
          - name: ticker
            main: true
            command: ["sh", "-c", "echo old; while :; do [ -e {poke} ] && rm {poke} && echo new; sleep 0.05; done"]
        """,
    )
    with Supervisor(["-c", config]) as sup:
        sup.wait_for("^old$", stream="stdout")
        follow = subprocess.Popen(
            [SUPERVISOR, "logs", "ticker", "-f", "-n", "1"],
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "SUPERVISOR_SOCKET": sup.socket},
        )
        lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=lambda: [lines.put(line) for line in follow.stdout or ()], daemon=True).start()
        try:
            assert lines.get(timeout=15) == "old\n"  # the backlog first
            for _ in range(2):
                poke.touch()
                assert lines.get(timeout=15) == "new\n"
        finally:
            follow.kill()
            follow.wait()
