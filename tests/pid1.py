"""Run the real ``supervisor`` CLI as PID 1 of a fresh PID namespace.

``unshare -Urpf --mount-proc --kill-child`` works as root and as an ordinary
user; the namespace's PID 1 is the only child of the ``unshare`` process, and
``--kill-child`` guarantees that a test that dies half-way leaves nothing
running (the kernel kills the namespace when its init dies).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypedDict, Unpack, cast

BIN = Path(sys.executable).parent
SUPERVISOR = str(BIN / "supervisor") if (BIN / "supervisor").exists() else shutil.which("supervisor") or "supervisor"
UNSHARE = ["unshare", "-Urpf", "--mount-proc", "--kill-child"]
# Without a user namespace: real root inside, for tests that change users.
UNSHARE_ROOT = ["unshare", "-pf", "--mount-proc", "--kill-child"]


class Launch(TypedDict, total=False):
    """How a ``Supervisor`` is started, besides its arguments."""

    pid1: bool  # PID 1 of a new PID namespace (default), or a plain child of the test
    user_namespace: bool  # default True; False: real root inside, for tests that change users
    env: dict[str, str] | None  # added to the test's environment
    stdin: int | None  # default /dev/null
    cwd: str | Path | None
    pass_fds: Sequence[int]
    wrap: Sequence[str]  # a command that runs the rest (``prlimit --nofile=...``)


class Supervisor:
    """A running supervisor; stdout and stderr are collected in the background."""

    def __init__(self, args: Sequence[str], **launch: Unpack[Launch]) -> None:
        unshare = UNSHARE if launch.get("user_namespace", True) else UNSHARE_ROOT
        env = dict(launch.get("env") or {})
        # Each supervisor gets its own control socket: tests run in parallel,
        # and /run/supervisor/ is shared by every PID namespace on the host.
        self._socket_dir: tempfile.TemporaryDirectory[str] | None = None
        if "SUPERVISOR_SOCKET" not in env:
            self._socket_dir = tempfile.TemporaryDirectory(prefix="sup-sock-")
            env["SUPERVISOR_SOCKET"] = os.path.join(self._socket_dir.name, "control.sock")
        self.socket = env["SUPERVISOR_SOCKET"]
        self.pid1 = launch.get("pid1", True)
        argv = [*unshare, SUPERVISOR, *args] if self.pid1 else [SUPERVISOR, *args]
        argv = [*launch.get("wrap", ()), *argv]
        self._pid: int | None = None
        self.started = time.monotonic()
        self.proc = subprocess.Popen(
            argv,
            stdin=launch.get("stdin", subprocess.DEVNULL),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={**os.environ, **env},
            cwd=launch.get("cwd"),
            pass_fds=launch.get("pass_fds", ()),
        )
        self.stdout_lines: list[str] = []
        self.stderr_lines: list[str] = []
        self._changed = threading.Condition()
        self._readers = [
            threading.Thread(target=self._read, args=(self.proc.stdout, self.stdout_lines), daemon=True),
            threading.Thread(target=self._read, args=(self.proc.stderr, self.stderr_lines), daemon=True),
        ]
        for reader in self._readers:
            reader.start()

    def _read(self, stream: object, lines: list[str]) -> None:
        for raw in stream:  # type: ignore[attr-defined]
            with self._changed:
                lines.append(raw.decode(errors="replace").rstrip("\n"))
                self._changed.notify_all()
        with self._changed:
            self._changed.notify_all()

    @property
    def pid(self) -> int:
        """The supervisor's PID as seen from the test (outside the namespace)."""
        if not self.pid1:
            return self.proc.pid
        if self._pid is not None:
            return self._pid
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                children = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read_text().split()
            except OSError:
                children = []
            if children:
                self._pid = int(children[0])
                return self._pid
            time.sleep(0.005)
        raise AssertionError("the supervisor never started inside the namespace")

    def signal(self, signo: int) -> None:
        os.kill(self.pid, signo)

    def wait(self, timeout: float = 30) -> int:
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"supervisor still running after {timeout}s\n{self.output}") from None
        for reader in self._readers:
            reader.join(5)
        return code

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()  # --kill-child takes the namespace down with it
            self.proc.wait(10)
        if self._socket_dir is not None:
            self._socket_dir.cleanup()
            self._socket_dir = None

    def wait_for(self, pattern: str, timeout: float = 15, stream: str = "stderr", count: int = 1) -> re.Match[str]:
        """Block until the ``count``-th line matching ``pattern`` appears; return its match."""
        regex = re.compile(pattern)
        lines = self.stderr_lines if stream == "stderr" else self.stdout_lines
        end = time.monotonic() + timeout
        seen = found = 0
        with self._changed:
            while True:
                for line in lines[seen:]:
                    match = regex.search(line)
                    found += match is not None
                    if match and found == count:
                        return match
                seen = len(lines)
                left = end - time.monotonic()
                if left <= 0 or (self.proc.poll() is not None and not any(r.is_alive() for r in self._readers)):
                    raise AssertionError(f"no line matching {pattern!r} (#{count}) within {timeout}s\n{self.output}")
                self._changed.wait(min(left, 0.2))

    @property
    def output(self) -> str:
        return "--- stdout\n" + "\n".join(self.stdout_lines) + "\n--- stderr\n" + "\n".join(self.stderr_lines)

    def json_records(self) -> list[dict[str, object]]:
        records = []
        for line in self.stderr_lines:
            if line.startswith("{"):
                records.append(json.loads(line))
        return records

    def timeline(self) -> list[dict[str, Any]]:
        """The shutdown timeline's steps, from the JSON log (``--log-format
        json``); AssertionError if the supervisor logged none."""
        for record in self.json_records():
            if "timeline" in record:
                return cast(list[dict[str, Any]], record["timeline"])
        raise AssertionError(f"no shutdown timeline in the log\n{self.output}")

    def __enter__(self) -> Supervisor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.kill()


def run(args: Sequence[str], *, timeout: float = 30, **launch: Unpack[Launch]) -> tuple[int, Supervisor]:
    """Run to completion; returns the exit status and the finished Supervisor."""
    sup = Supervisor(args, **launch)
    return sup.wait(timeout), sup


def sigterm_at_start(args: Sequence[str]) -> tuple[int, Supervisor]:
    """SIGTERM to PID 1 as soon as it has a child (the orchestrator, whose
    imports are still to come); its exit status and the run."""
    with Supervisor(args) as sup:
        pid = sup.pid
        wait_until(lambda: Path(f"/proc/{pid}/task/{pid}/children").read_text().strip(), interval=0.0002)
        sup.signal(signal.SIGTERM)
        return sup.wait(timeout=20), sup


def wait_until(predicate: object, timeout: float = 10, interval: float = 0.01) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():  # type: ignore[operator]
            return
        time.sleep(interval)
    raise AssertionError(f"condition not met within {timeout}s")


def shell_wait(condition: str, seconds: int = 20) -> str:
    """A shell loop for a supervised ``sh -c`` that waits until the shell
    test ``condition`` holds (a file another process or the test writes),
    bounded to about ``seconds``: children wait on events, not on sleeps."""
    return f"i=0; until {condition} || [ $i -ge {seconds * 50} ]; do sleep 0.02; i=$((i+1)); done"


def pid_alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def ended_at_the_wall(records: list[dict[str, object]], *steps: str) -> bool:
    """Whether PID 1 killed everything at the wall (JSON log records), which
    a loaded machine can make of a short grace period: the orchestrator not
    scheduled in time to escalate and log, or still importing trio with the
    main process started before it.  Then exactly one line says so, naming
    start-up or one of ``steps`` as the stage reached."""
    walls = [r for r in records if "over: SIGKILL to" in str(r["message"])]
    if not walls:
        return False
    assert len(walls) == 1 and walls[0]["phase"] in ("start-up", *steps), records
    return True
