"""The control socket holds up under its own users (root and the
supervisor's uid): deep JSON, vanishing followers, floods of connections,
lines that are expensive to keep."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

from supervisor.control.server import MAX_FOLLOWERS
from tests.control._ctl import ctl, row, wait_status, write_config
from tests.pid1 import SUPERVISOR, Supervisor, wait_until


def _config(tmp_path: Path, spew: str = "i=0; while :; do echo line $i; i=$((i+1)); sleep 0.01; done") -> str:
    return write_config(
        tmp_path,
        f"""
        processes:
          - name: spew
            command: [sh, -c, "{spew}"]
          - name: app
            main: true
            command: [sleep, "120"]
        """,
    )


def _orchestrator(sup: Supervisor) -> int:
    return int(Path(f"/proc/{sup.pid}/task/{sup.pid}/children").read_text().split()[0])


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def _ask(path: str, raw: bytes) -> list[dict[str, object]]:
    with socket.socket(socket.AF_UNIX) as sock:
        sock.settimeout(20)
        sock.connect(path)
        sock.sendall(raw)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    return [json.loads(line) for line in data.splitlines()]


def test_json_nested_too_deeply_gets_an_answer_not_a_traceback(tmp_path: Path) -> None:
    with Supervisor(["-c", _config(tmp_path)]) as sup:
        wait_status(sup, lambda a: row(a, "spew")["state"] == "running")
        depth = 30_000  # 60 KB: within the 64 KiB a request may have
        answers = _ask(sup.socket, b'{"command": ' + b"[" * depth + b"]" * depth + b"}\n")
        assert answers == [{"ok": False, "error": "not a request: nested too deeply"}]
        assert ctl(sup, "status").returncode == 0
        sup.signal(signal.SIGTERM)
        sup.wait()
    assert "Traceback" not in sup.output and "RecursionError" not in sup.output


def test_followers_that_vanish_leave_no_error_and_their_number_is_bounded(tmp_path: Path) -> None:
    with Supervisor(["-c", _config(tmp_path)]) as sup:
        wait_status(sup, lambda a: row(a, "spew")["state"] == "running")
        for _round in range(4):
            # Followers that never read: the server's writes meet full
            # buffers, then a closed socket with unread data (a reset).
            silent = []
            for _ in range(MAX_FOLLOWERS):
                sock = socket.socket(socket.AF_UNIX)
                sock.connect(sup.socket)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                sock.sendall(b'{"command": "logs", "follow": true, "lines": 1000}\n')
                silent.append(sock)
            # One more is told why it is not served.
            extra = ctl(sup, "logs", "-f", timeout=30)
            assert extra.returncode == 1
            assert extra.stderr == (
                f"supervisor logs: busy: {MAX_FOLLOWERS} clients follow the logs already; try again later\n"
            )
            time.sleep(0.3)  # lines pile up in the silent followers' buffers
            for sock in silent:
                sock.close()
            # Ctrl-C on an ordinary `supervisor logs -f`.
            follower = subprocess.Popen(
                [SUPERVISOR, "logs", "-f"],
                stdout=subprocess.PIPE,
                env={**os.environ, "SUPERVISOR_SOCKET": sup.socket},
            )
            assert follower.stdout is not None
            follower.stdout.readline()
            follower.send_signal(signal.SIGINT)
            assert follower.wait(10) == 130
        sup.signal(signal.SIGTERM)
        sup.wait()
    assert "ERROR" not in sup.output and "Traceback" not in sup.output, sup.output[-3000:]


def test_a_flood_of_idle_connections_costs_bounded_memory(tmp_path: Path) -> None:
    with Supervisor(["-c", _config(tmp_path, "exec sleep 120")]) as sup:
        wait_status(sup, lambda a: row(a, "spew")["state"] == "running")
        orchestrator = _orchestrator(sup)
        before = _rss_kib(orchestrator)
        idle: list[socket.socket] = []
        try:
            end = time.monotonic() + 60
            while len(idle) < 4000 and time.monotonic() < end:
                sock = socket.socket(socket.AF_UNIX)
                sock.setblocking(False)
                try:
                    sock.connect(sup.socket)
                except BlockingIOError:  # the backlog is full: the server is busy accepting
                    sock.close()
                    time.sleep(0.001)
                    continue
                idle.append(sock)
            assert len(idle) == 4000
            grown = _rss_kib(orchestrator) - before
        finally:
            for sock in idle:
                sock.close()
        assert grown < 10 * 1024, f"the orchestrator grew by {grown} KiB"
        # Served again once the flood is over.
        wait_until(lambda: ctl(sup, "status").returncode == 0, timeout=20, interval=0.2)
        sup.signal(signal.SIGTERM)
        sup.wait()
    assert "Traceback" not in sup.output


def test_the_log_ring_is_bounded_in_bytes_not_only_in_lines(tmp_path: Path) -> None:
    # One emoji makes Python keep a line at four bytes a character.
    emoji = "\\\\360\\\\237\\\\230\\\\200"  # U+1F600 as printf's octal escapes, in YAML's double quotes
    spew = f"for i in $(seq 1000); do printf '{emoji}%08000d\\\\n' $i; done; echo done; exec sleep 120"
    with Supervisor(["-c", _config(tmp_path, spew)]) as sup:
        wait_status(sup, lambda a: row(a, "spew")["state"] == "running")
        orchestrator = _orchestrator(sup)
        before = _rss_kib(orchestrator)
        # (Not from stdout: the supervisor drops lines there when the test reads slowly.)
        wait_until(lambda: ctl(sup, "logs", "spew", "-n", "1").stdout == "done\n", timeout=60, interval=0.1)
        grown = _rss_kib(orchestrator) - before
        kept = ctl(sup, "logs", "spew", "-n", "1000").stdout.splitlines()
        sup.signal(signal.SIGTERM)
        sup.wait()
    # 1000 such lines are 32 MB as Python strings; the ring keeps 2 MiB of them.
    assert 32 <= len(kept) < 1000
    assert grown < 12 * 1024, f"the orchestrator grew by {grown} KiB"
