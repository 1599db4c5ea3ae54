"""An init under test as PID 1 of a fresh PID namespace, and the probe's channel.

``unshare -Urpf --mount-proc --kill-child`` makes the namespace; its PID 1 is
the only child of the ``unshare`` process, and killing ``unshare`` takes the
whole namespace down (``--kill-child``), so nothing a scenario starts can
outlive it.  Every init is started through ``probe exec-stamp``, which stamps
CLOCK_MONOTONIC right before it execs the init: the start-up figure is "init
exec → main process exec", not the cost of ``unshare``.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Channel", "Event", "ExitWatch", "Sandbox", "SandboxError"]

UNSHARE = ("unshare", "-Urpf", "--mount-proc", "--kill-child")
# Without a user namespace (real root inside), for libvirtd and QEMU.
UNSHARE_ROOT = ("unshare", "-pf", "--mount-proc", "--kill-child")


class SandboxError(Exception):
    """The init or the probe did not do what the scenario needs; the message
    says what, with the init's log."""


@dataclass(frozen=True)
class Event:
    """One message from the probe: ``tag`` and when (CLOCK_MONOTONIC, ns)."""

    tag: str
    ns: int
    extra: tuple[str, ...] = ()


class Channel:
    """The runner's end of the probe's datagram socket."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(path))
        os.chmod(path, 0o777)

    def receive(self, timeout: float, expect: str | None = None) -> Event:
        """The next event (of tag ``expect``, skipping others)."""
        end = time.monotonic() + timeout
        while True:
            left = end - time.monotonic()
            if left <= 0 or not select.select([self.sock], [], [], left)[0]:
                raise SandboxError(f"no {expect or 'event'} from the probe within {timeout:g}s")
            words = self.sock.recv(4096).decode().split()
            # "orphans REAPED LOST NS ZOMBIES": the time is the last-but-one word
            # for tags with details, so parse from the tag's shape.
            if words[0] == "orphans":
                event = Event(words[0], int(words[3]), (words[1], words[2], words[4]))
            else:
                event = Event(words[0], int(words[1]), tuple(words[2:]))
            if expect is None or event.tag == expect:
                return event

    def drain(self) -> None:
        self.sock.setblocking(False)
        with contextlib.suppress(BlockingIOError):
            while True:
                self.sock.recv(4096)
        self.sock.setblocking(True)

    def close(self) -> None:
        self.sock.close()
        self.path.unlink(missing_ok=True)


class ExitWatch:
    """Times a process's end from outside: a thread blocks on its pidfd
    (readable the moment the process is gone, before anyone reaps it) and
    stamps CLOCK_MONOTONIC, so the stamp does not wait for the runner."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.exited_ns: int | None = None
        try:
            self._fd: int | None = os.pidfd_open(pid)
        except ProcessLookupError:
            # Already gone and reaped: there is no exit time to measure.
            self._fd = None
            self._thread = None
            return
        self._thread = threading.Thread(target=self._watch, daemon=True, name=f"exit-watch-{pid}")
        self._thread.start()

    def _watch(self) -> None:
        assert self._fd is not None
        poller = select.poll()
        poller.register(self._fd, select.POLLIN)
        poller.poll()
        self.exited_ns = time.monotonic_ns()

    def wait(self, timeout: float) -> int | None:
        """The exit time (ns), or None if it still runs after ``timeout``
        or was gone before the watch began."""
        if self._thread is None:
            return None
        self._thread.join(timeout)
        return self.exited_ns

    @property
    def gone_before_watch(self) -> bool:
        return self._fd is None

    def close(self) -> None:
        # A daemon thread still polling holds no resources worth waiting for;
        # the descriptor is closed once it has returned.
        if self._fd is not None and (self._thread is None or not self._thread.is_alive()):
            os.close(self._fd)
            self._fd = None


class Sandbox:
    """One init as PID 1 of its own namespace; its output goes to ``log``."""

    def __init__(
        self,
        probe: Path,
        channel: Channel,
        init_argv: Sequence[str],
        log: Path,
        *,
        env: dict[str, str] | None = None,
        user_namespace: bool = True,
    ) -> None:
        self.log = log
        self.started_ns = time.monotonic_ns()
        unshare = UNSHARE if user_namespace else UNSHARE_ROOT
        with log.open("ab") as out:
            self.proc = subprocess.Popen(
                [*unshare, str(probe), "exec-stamp", str(channel.path), *init_argv],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, **(env or {})},
            )
        self._pid1: int | None = None
        self._watch: ExitWatch | None = None

    @property
    def pid1(self) -> int:
        """PID 1 of the namespace, as the runner sees it."""
        if self._pid1 is None:
            end = time.monotonic() + 10
            while time.monotonic() < end:
                children = _children(self.proc.pid)
                if children:
                    self._pid1 = children[0]
                    # Watched at once, so that its exit is timed even if it is soon.
                    self._watch = ExitWatch(self._pid1)
                    return self._pid1
                if self.proc.poll() is not None:
                    break
                time.sleep(0.001)
            raise SandboxError(f"the init never started (or ended at once)\n{self.output()}")
        return self._pid1

    def signal(self, signo: int) -> None:
        os.kill(self.pid1, signo)

    def processes(self) -> list[int]:
        """Every process of the namespace (outside PIDs), PID 1 first."""
        found = []
        todo = [self.pid1]
        while todo:
            pid = todo.pop(0)
            found.append(pid)
            todo.extend(_children(pid))
        return found

    def wait_exit_ns(self, timeout: float) -> int | None:
        """Block until PID 1 exits; returns when (CLOCK_MONOTONIC ns), or
        None when it had ended before the runner started watching it."""
        try:
            self.pid1  # noqa: B018 (starts the watch)
        except SandboxError:
            if self.proc.poll() is not None:
                return None
            raise
        assert self._watch is not None
        if self._watch.gone_before_watch:
            return None
        at = self._watch.wait(timeout)
        if at is None:
            raise SandboxError(f"the init was still running {timeout:g}s later\n{self.output()}")
        return at

    def exit_code(self, timeout: float = 10) -> int:
        """The init's exit status as ``unshare`` reports it (128+N for a signal)."""
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise SandboxError(f"unshare still running {timeout:g}s later\n{self.output()}") from None

    def output(self, lines: int = 30) -> str:
        try:
            text = self.log.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def close(self) -> None:
        """Kill the namespace if it still runs (``--kill-child`` does the rest)."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(10)
        if self._watch is not None:
            self._watch.close()

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _children(pid: int) -> list[int]:
    found: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for task in tasks:
        try:
            found.extend(int(c) for c in Path(f"/proc/{pid}/task/{task}/children").read_text().split())
        except OSError:
            continue
    return found


@contextlib.contextmanager
def busy_cores(count: int | None = None) -> Iterator[None]:
    """Keep every core busy with ``yes > /dev/null`` processes of our own
    (two per core), as on a shared machine, and stop exactly those after."""
    hogs = [
        subprocess.Popen(["yes"], stdout=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
        for _ in range(count or 2 * (os.cpu_count() or 2))
    ]
    try:
        yield
    finally:
        for hog in hogs:
            hog.kill()
        for hog in hogs:
            hog.wait()
