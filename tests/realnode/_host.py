"""What a real node leaves on the host, found by the node's name and removed.

Every node has a name ``pid1-node-<PID>-<hex>`` (the PID of the test process
that made it, as the namespaces of ``tests/node`` have): its network namespace,
its cgroup (``cgroupRoot`` in every v1 hierarchy), its directory under
``/var/tmp`` and every process it started carry that name, in their
command line or in their cgroup path.  So ``remove(name)`` needs nothing but
the name, and ``sweep()`` removes what a run killed before its clean-up left,
for every name whose PID is gone.

kubelet and containerd also use paths that are the same whatever their
configuration says (``/var/lib/kubelet/device-plugins``,
``/var/log/containers``, ``/run/containerd/s``): one node per machine at a
time, so a node holds ``LOCK`` (flock) while it lives, and the clean-up of
those paths removes only what nobody uses (symlinks into a node directory,
sockets nobody listens on).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

from tests.node._netns import NETNS_DIR, PREFIX, _alive

__all__ = [
    "CGROUP_ROOT",
    "LOCK",
    "WORK_ROOT",
    "host_lock",
    "leftovers",
    "make_cgroups",
    "new_name",
    "remove",
    "sweep",
]

CGROUP_ROOT = Path("/sys/fs/cgroup")
WORK_ROOT = Path("/var/tmp")
LOCK = Path("/run/pid1-node.lock")
_NAME = re.compile(rf"{PREFIX}(\d+)-[0-9a-f]{{6}}")
# kubelet's and containerd's paths that ignore --root-dir and `state`.
KUBELET_GLOBAL = Path("/var/lib/kubelet")
CONTAINER_LOGS = Path("/var/log/containers")
SHIM_SOCKETS = Path("/run/containerd/s")
RUNC_STATE = Path("/run/containerd/runc")


def new_name() -> str:
    return f"{PREFIX}{os.getpid()}-{secrets.token_hex(3)}"


@contextlib.contextmanager
def host_lock(timeout: float) -> Iterator[None]:
    """Hold the machine's one-node lock (waiting up to ``timeout`` for
    another run's node to go)."""
    with LOCK.open("a") as lock:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"another real node held {LOCK} for {timeout:g} s") from None
                time.sleep(0.5)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def hierarchies() -> list[Path]:
    return sorted(p for p in CGROUP_ROOT.iterdir() if p.is_dir() and not p.is_symlink())


def make_cgroups(name: str) -> None:
    """The node's ``cgroupRoot``: kubelet's cgroupfs driver expects it in every hierarchy."""
    for hierarchy in hierarchies():
        (hierarchy / name).mkdir(exist_ok=True)


def _pids_of(name: str) -> set[int]:
    """Every process whose command line or cgroup names the node."""
    found: set[int] = set()
    needle = name.encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        with contextlib.suppress(OSError):
            if (
                needle in Path(f"/proc/{entry}/cmdline").read_bytes()
                or needle in Path(f"/proc/{entry}/cgroup").read_bytes()
            ):
                found.add(int(entry))
    return found


def kill_all(name: str, timeout: float = 30) -> None:
    """SIGKILL, by PID, every process of the node until none is left (the
    shims fork containers meanwhile)."""
    deadline = time.monotonic() + timeout
    while pids := _pids_of(name):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if time.monotonic() > deadline:
            raise RuntimeError(f"processes of {name} outlive SIGKILL: {sorted(pids)}")
        time.sleep(0.05)


def _unescape(field: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def mounts_under(directory: Path) -> list[str]:
    """Mount points at or below ``directory``, deepest first."""
    prefix = str(directory)
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = _unescape(line.split()[4])
        if point == prefix or point.startswith(prefix + "/"):
            points.append(point)
    return sorted(set(points), key=lambda p: (-p.count("/"), p))


def unmount_all(directory: Path) -> None:
    for _ in range(10):  # a mount can hide another at the same point
        points = mounts_under(directory)
        if not points:
            return
        for point in points:
            subprocess.run(["umount", "--lazy", point], capture_output=True, check=False)
    raise RuntimeError(f"mounts under {directory} survive umount: {mounts_under(directory)}")


def remove_cgroups(name: str) -> None:
    for hierarchy in hierarchies():
        top = hierarchy / name
        if not top.is_dir():
            continue
        # Children before parents; rmdir is the only way to remove a cgroup.
        for directory in sorted((Path(d) for d, _, _ in os.walk(top)), key=lambda p: -len(p.parts)):
            with contextlib.suppress(FileNotFoundError):
                directory.rmdir()


def remove(name: str) -> None:
    """Everything of the node ``name``: processes (by PID), mounts, network
    namespace, cgroups, directory."""
    kill_all(name)
    work = WORK_ROOT / name
    unmount_all(work)
    if (NETNS_DIR / name).exists():
        subprocess.run(["ip", "netns", "delete", name], capture_output=True, check=False)
    remove_cgroups(name)
    shutil.rmtree(work, ignore_errors=True)
    _remove_global_leftovers()


def _remove_global_leftovers() -> None:
    """The host-global paths: what points into a node directory that is
    gone, sockets nobody listens on, and the directories if left empty."""
    _remove_dangling_logs()
    _remove_dead_runc_state()
    for directory in (SHIM_SOCKETS, KUBELET_GLOBAL / "device-plugins"):
        with contextlib.suppress(OSError):
            for entry in directory.iterdir():
                if entry.is_socket() and not _listening(entry):
                    entry.unlink()
    (KUBELET_GLOBAL / "device-plugins" / "kubelet_internal_checkpoint").unlink(missing_ok=True)
    # Every directory left empty; rmdir leaves whatever is not.
    for top in (SHIM_SOCKETS.parent, KUBELET_GLOBAL, CONTAINER_LOGS):
        for below, _, _ in sorted(os.walk(top), key=lambda entry: -len(entry[0])):
            with contextlib.suppress(OSError):
                os.rmdir(below)


def _remove_dangling_logs() -> None:
    with contextlib.suppress(OSError):
        for link in CONTAINER_LOGS.iterdir():
            target = os.readlink(link) if link.is_symlink() else ""
            if target.startswith(f"{WORK_ROOT}/{PREFIX}") and not link.exists():
                link.unlink()


def _remove_dead_runc_state() -> None:
    """runc's state under /run/containerd/runc/<namespace>/<container>: a
    container killed with its node keeps it; its rootfs names the node."""
    for state in RUNC_STATE.glob("*/*/state.json"):
        with contextlib.suppress(OSError, ValueError, KeyError):
            rootfs = Path(json.loads(state.read_text())["config"]["rootfs"])
            node = rootfs.parents[len(rootfs.parents) - 4]  # /var/tmp/<node name>
            if node.parent == WORK_ROOT and _NAME.fullmatch(node.name) and not node.exists():
                shutil.rmtree(state.parent)


def _listening(path: Path) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        try:
            sock.connect(str(path))
        except OSError:
            return False
        return True


def leftovers(name: str) -> list[str]:
    """What of the node ``name`` is still on the machine (empty after ``remove``)."""
    found = [f"process {pid}" for pid in sorted(_pids_of(name))]
    found += [f"mount {point}" for point in mounts_under(WORK_ROOT / name)]
    found += [str(path) for path in (NETNS_DIR / name, WORK_ROOT / name) if path.exists()]
    found += [str(h / name) for h in hierarchies() if (h / name).exists()]
    return found


def sweep() -> None:
    """Remove every node whose creating process is gone (a killed run)."""
    names: set[str] = set()
    for place in (NETNS_DIR, WORK_ROOT, *hierarchies()):
        with contextlib.suppress(OSError):
            names.update(entry.name for entry in place.iterdir() if _NAME.fullmatch(entry.name))
    for name in sorted(names):
        match = _NAME.fullmatch(name)
        if match is not None and not _alive(int(match.group(1))):
            remove(name)
