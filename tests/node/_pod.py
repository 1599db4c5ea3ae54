"""One pod's sandbox and container, as the kubelet and a container runtime
would make them, without images: the pod's network namespace (from
``NodeNetwork``), and its one container's command as PID 1 of new PID, mount
and UTS namespaces, with the service-account token mounted where a pod sees
it and the host name set to the pod's name.

The container is started as::

    nsenter --net=POD-NETNS unshare --pid --fork --mount --uts --mount-proc \\
        --kill-child sh -c 'mount the token; hostname NAME; exec "$@"' sh COMMAND...

``sh`` is PID 1 only until its ``exec``: the container's command (the
supervisor, here) *is* PID 1.  ``--kill-child`` ties the namespace to
``unshare``, so killing that process (by PID) takes every process of the pod
down with it.  The token directory is mounted over a private tmpfs on /run
(so /var/run/secrets/kubernetes.io/serviceaccount exists in the pod only;
the host's /run is not touched).
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Container", "PodError", "log_tail"]

TOKEN_DIR = "/run/secrets/kubernetes.io/serviceaccount"
_SETUP = (
    'set -e; mount -t tmpfs -o mode=0755,size=1m pod-run /run; mkdir -p "$TOKEN_DIR";'
    ' mount --bind "$POD_TOKEN_SOURCE" "$TOKEN_DIR"; mount -o remount,bind,ro "$TOKEN_DIR";'
    ' hostname "$POD_HOSTNAME"; unset POD_TOKEN_SOURCE POD_HOSTNAME TOKEN_DIR; exec "$@"'
)


class PodError(Exception):
    pass


@dataclass
class Container:
    """The container's PID 1; ``exited_at`` is stamped (time.monotonic) the
    moment PID 1 is gone, from a pidfd."""

    netns: str
    hostname: str
    command: Sequence[str]
    env: dict[str, str]
    token_dir: Path
    log: Path
    proc: subprocess.Popen[bytes] | None = None
    pid1: int | None = None
    started_at: float | None = None
    exited_at: float | None = None
    exit_status: int | None = None
    _exited: threading.Event = field(default_factory=threading.Event)

    def start(self) -> None:
        argv = [
            "nsenter",
            f"--net=/run/netns/{self.netns}",
            "unshare",
            "--pid",
            "--fork",
            "--mount",
            "--uts",
            "--propagation",
            "private",
            "--mount-proc",
            "--kill-child",
            "/bin/sh",
            "-c",
            _SETUP,
            "sh",
            *self.command,
        ]
        env = {
            **self.env,
            "POD_TOKEN_SOURCE": str(self.token_dir),
            "POD_HOSTNAME": self.hostname,
            "TOKEN_DIR": TOKEN_DIR,
        }
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
        self.started_at = time.monotonic()
        self.pid1 = self._find_pid1()
        threading.Thread(target=self._watch_exit, daemon=True, name=f"pid1-{self.hostname}").start()

    def _find_pid1(self) -> int:
        assert self.proc is not None
        end = time.monotonic() + 10
        while time.monotonic() < end:
            with contextlib.suppress(OSError):
                children = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read_text().split()
                if children:
                    return int(children[0])
            if self.proc.poll() is not None:
                break
            time.sleep(0.005)
        raise PodError(f"the container of {self.hostname} never started:\n{self.output()}")

    def _watch_exit(self) -> None:
        assert self.proc is not None and self.pid1 is not None
        try:
            fd = os.pidfd_open(self.pid1)
        except ProcessLookupError:
            fd = None
        if fd is not None:
            try:
                select.select([fd], [], [])
            finally:
                os.close(fd)
        self.exited_at = time.monotonic()
        # unshare exits with PID 1's status, right after it.
        status = self.proc.wait()
        self.exit_status = status
        self._exited.set()

    @property
    def running(self) -> bool:
        return self.pid1 is not None and not self._exited.is_set()

    def signal(self, signo: int) -> None:
        if self.pid1 is not None and not self._exited.is_set():
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid1, signo)

    def wait(self, timeout: float) -> bool:
        return self._exited.wait(timeout)

    def exec(self, argv: Sequence[str], timeout: float) -> int | None:
        """Run ``argv`` in the container's namespaces (a preStop hook's exec);
        None when it ran out of time (it is killed then)."""
        if self.pid1 is None:
            raise PodError("the container is not running")
        command = ["nsenter", f"--target={self.pid1}", "--net", "--pid", "--mount", "--uts", "--", *argv]
        with self.log.open("ab") as log:
            proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
            try:
                return proc.wait(max(timeout, 0.0))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                return None

    def kill(self) -> None:
        """SIGKILL PID 1 (the namespace dies with it), then reap ``unshare``."""
        self.signal(signal.SIGKILL)
        if self.proc is not None and self.proc.poll() is None:
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()  # unshare --kill-child takes PID 1 with it
                self.proc.wait(10)
        self._exited.wait(10)

    def output(self, lines: int = 40) -> str:
        return log_tail(self.log, lines)


def log_tail(log: Path, lines: int = 40) -> str:
    """The last ``lines`` of a container's log ("" when there is none)."""
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])
