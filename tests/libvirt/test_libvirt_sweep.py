"""What a killed test run left behind is swept by the next one, and nothing
of a run still going is touched."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.libvirt.lv_daemon import Libvirtd, sweep_dead_runs
from tests.pid1 import wait_until


@pytest.fixture
def root() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="sweep-root-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _fake_guest(base: Path) -> subprocess.Popen[bytes]:
    """A process that looks like a guest of the run in ``base``: argv[0] is
    a qemu-system binary in the run's directory."""
    qemu = base / "bin" / "qemu-system-x86_64"
    qemu.parent.mkdir()
    shutil.copy("/bin/sleep", qemu)
    guest = subprocess.Popen([str(qemu), "600"])
    # Popen returns once the exec has closed its error pipe, which the kernel
    # does before it writes the new program's arguments: for a moment the
    # guest's /proc/PID/cmdline is empty, and a sweep would not know it.
    # A guest of a killed run has long been past that moment.
    wait_until(lambda: _proc(guest.pid)[0].startswith(str(qemu).encode()))
    return guest


def _proc(pid: int) -> tuple[bytes, str]:
    """What /proc says of ``pid`` now: its command line and state."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes(), Path(f"/proc/{pid}/stat").read_text()
    except OSError as exc:
        return b"", str(exc)


def _dead_pid() -> int:
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


def test_a_dead_runs_guest_and_directory_are_swept(root: Path) -> None:
    dead = Libvirtd(Path(tempfile.mkdtemp(prefix="svlv-", dir=root)))
    (dead.base / "owner").write_text(f"{_dead_pid()} 1")
    guest = _fake_guest(dead.base)
    try:
        assert sweep_dead_runs(root) == [dead.base]
        try:
            status = guest.wait(timeout=30)
        except subprocess.TimeoutExpired:
            status = None
        assert status == -9, _proc(guest.pid)
        assert not dead.base.exists()
    finally:
        if guest.poll() is None:
            guest.kill()
            guest.wait()


def test_a_live_runs_directory_and_guest_are_left_alone(root: Path) -> None:
    live = Libvirtd(Path(tempfile.mkdtemp(prefix="svlv-", dir=root)))  # owned by this process
    guest = _fake_guest(live.base)
    try:
        assert sweep_dead_runs(root) == []
        assert guest.poll() is None
        assert (live.base / "owner").read_text().startswith(f"{os.getpid()} ")
    finally:
        guest.kill()
        guest.wait()
        live.cleanup()
    wait_until(lambda: not live.base.exists())
