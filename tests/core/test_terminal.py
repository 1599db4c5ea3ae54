"""An interactive main process under a terminal, as with `docker run -it`."""

from __future__ import annotations

import fcntl
import os
import select
import subprocess
import termios
import time
from collections.abc import Iterator
from contextlib import contextmanager

from tests.pid1 import SUPERVISOR, UNSHARE


def _read_until(fd: int, needle: bytes, timeout: float) -> bytes:
    seen = b""
    end = time.monotonic() + timeout
    while needle not in seen and time.monotonic() < end:
        ready, _, _ = select.select([fd], [], [], 0.1)
        if ready:
            try:
                seen += os.read(fd, 4096)
            except OSError:
                break
    return seen


def _make_controlling_terminal() -> None:
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


@contextmanager
def in_a_terminal(args: list[str]) -> Iterator[tuple[int, subprocess.Popen[bytes]]]:
    """The supervisor in a session of its own whose controlling terminal is a
    fresh pty; yields the pty's controller side and the process."""
    controller, terminal = os.openpty()
    proc = subprocess.Popen(
        [*UNSHARE, SUPERVISOR, *args],
        stdin=terminal,
        stdout=terminal,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        preexec_fn=_make_controlling_terminal,  # noqa: PLW1509 - the test process has no threads of its own
    )
    os.close(terminal)
    try:
        yield controller, proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(controller)


def test_the_main_process_owns_the_terminal_from_its_first_read() -> None:
    # The main process reads the terminal at once: it must already be the
    # terminal's foreground process group, or SIGTTIN would stop it.
    with in_a_terminal(["--", "sh", "-c", "read line; echo got:$line; exit 4"]) as (controller, proc):
        os.write(controller, b"hello\n")
        output = _read_until(controller, b"got:hello", 15)
        assert b"got:hello" in output, output
        assert proc.wait(15) == 4


def test_ctrl_c_reaches_the_main_process_and_gives_130() -> None:
    with in_a_terminal(["--", "sh", "-c", "echo ready; exec sleep 30"]) as (controller, proc):
        assert b"ready" in _read_until(controller, b"ready", 15)
        os.write(controller, b"\x03")  # the terminal's INTR character
        assert proc.wait(15) == 130
