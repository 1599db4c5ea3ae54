"""A private libvirtd for the tests: its own config, sockets and state.

It runs in a mount namespace of its own where this instance's directories are
bind-mounted over ``/etc/libvirt``, ``/run/libvirt``, ``/var/lib/libvirt``,
``/var/cache/libvirt`` and ``/var/log/libvirt``, so a system libvirtd (if
any) is never touched, and a restarted instance finds the QEMU processes of
the previous one (same state directories), as a real restart would.  The
client socket lives outside the namespace: ``qemu:///system?socket=...``.

QEMU runs as root with no security driver, cgroups or namespaces: the test
machines are containers without systemd, and the guest's kernel and
initramfs stay readable where the tests put them.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

LIBVIRTD = "/usr/sbin/libvirtd"
_BINDS = {
    "etc": "/etc/libvirt",
    "run": "/run/libvirt",
    "lib": "/var/lib/libvirt",
    "cache": "/var/cache/libvirt",
    "log": "/var/log/libvirt",
}

QEMU_CONF = """\
user = "root"
group = "root"
dynamic_ownership = 0
remember_owner = 0
security_driver = "none"
cgroup_controllers = [ ]
namespaces = [ ]
stdio_handler = "file"
"""


# Each instance's directory is /tmp/svlv-XXXX; its ``owner`` file holds the
# PID of the test process that made it, so a later run can tell the
# directories of runs that were killed (their owner gone) from those of
# runs still going (another checkout's suite, say).
_PREFIX = "svlv-"
_OWNER = "owner"


class Libvirtd:
    def __init__(self, base: Path | None = None) -> None:
        # Short path: unix socket names are limited to 108 bytes.
        self.base = Path(tempfile.mkdtemp(prefix=_PREFIX)) if base is None else base
        (self.base / _OWNER).write_text(f"{os.getpid()} {_start_time(os.getpid())}")
        self.socket = self.base / "sock" / "libvirt-sock"
        self.uri = f"qemu:///system?socket={self.socket}"
        self.log_file = self.base / "libvirtd.log"
        self.process: subprocess.Popen[bytes] | None = None
        for name in (*_BINDS, "sock", "etc/qemu", "console"):
            (self.base / name).mkdir(parents=True, exist_ok=True)
        (self.base / "etc" / "libvirtd.conf").write_text(
            f'unix_sock_dir = "{self.socket.parent}"\n'
            'unix_sock_rw_perms = "0700"\n'
            'auth_unix_rw = "none"\n'
            'auth_unix_ro = "none"\n'
            f'log_outputs = "3:file:{self.log_file}"\n'
        )
        (self.base / "etc" / "qemu.conf").write_text(QEMU_CONF)

    @property
    def save_dir(self) -> Path:
        return self.base / "lib" / "qemu" / "save"

    def command(self) -> list[str]:
        """The foreground command: a private mount namespace, then libvirtd."""
        mounts = "\n".join(
            f"mkdir -p {target} && mount --bind {self.base / name} {target}" for name, target in _BINDS.items()
        )
        config, pid_file = self.base / "etc" / "libvirtd.conf", self.base / "libvirtd.pid"
        script = f"set -e\n{mounts}\nexec {LIBVIRTD} --config {config} --pid-file {pid_file}\n"
        return ["unshare", "--mount", "--propagation", "private", "sh", "-c", script]

    def start(self, timeout: float = 30.0) -> None:
        self.socket.unlink(missing_ok=True)
        with open(self.base / "libvirtd.stderr", "ab") as stderr:
            self.process = subprocess.Popen(self.command(), stdout=subprocess.DEVNULL, stderr=stderr)
        self.wait_until_up(timeout)

    def wait_until_up(self, timeout: float = 30.0) -> None:
        end = time.monotonic() + timeout
        while not self._answers():
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(f"libvirtd exited with {self.process.returncode}: {self._tail()}")
            if time.monotonic() > end:
                raise RuntimeError(f"libvirtd did not answer within {timeout}s: {self._tail()}")
            time.sleep(0.1)

    def _answers(self) -> bool:
        if not self.socket.exists():
            return False
        result = subprocess.run(["virsh", "-q", "-c", self.uri, "uri"], capture_output=True, timeout=10, check=False)
        return result.returncode == 0

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 15.0) -> None:
        """Stop the daemon; its QEMU processes keep running (as in real life)."""
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def cleanup(self) -> None:
        """Stop the daemon, kill its leftover QEMU processes, remove its files."""
        self.stop()
        kill_qemu_under(self.base)
        shutil.rmtree(self.base, ignore_errors=True)

    def _tail(self) -> str:
        try:
            text = (self.base / "libvirtd.stderr").read_text() + self.log_file.read_text()
        except OSError:
            return ""
        return text[-2000:]


def kill_qemu_under(path: Path) -> None:
    """SIGKILL every qemu process whose command line mentions ``path``."""
    marker = str(path).encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if b"qemu-system" in cmdline.split(b"\0", 1)[0] and marker in cmdline:
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(entry.name), signal.SIGKILL)


def _start_time(pid: int) -> str:
    """The process's start time in clock ticks (field 22 of its stat): with
    the PID, it names one process even after the PID is reused."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return stat.rpartition(")")[2].split()[19]


def sweep_dead_runs(root: Path | None = None) -> list[Path]:
    """Kill the QEMU guests and libvirtds of test runs that were killed
    before their cleanup, and remove their directories; returns those.

    A run's directory is left alone while the process that made it lives.
    A directory without an owner file is one being made right now.
    """
    swept = []
    for base in (root or Path(tempfile.gettempdir())).glob(f"{_PREFIX}*"):
        try:
            pid, _, started = (base / _OWNER).read_text().partition(" ")
        except OSError:
            continue
        if pid.isdigit() and started and _start_time(int(pid)) == started:
            continue
        _kill_libvirtd_of(base)
        kill_qemu_under(base)
        shutil.rmtree(base, ignore_errors=True)
        swept.append(base)
    return swept


def _kill_libvirtd_of(base: Path) -> None:
    """SIGKILL the libvirtd of a dead run, by the PID in its pid file, if
    that process is still a libvirtd started with this run's config."""
    try:
        pid = int((base / "libvirtd.pid").read_text().strip())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, ValueError):
        return
    if cmdline.startswith(LIBVIRTD.encode()) and str(base).encode() in cmdline:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
