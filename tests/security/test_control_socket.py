"""Nobody else can stand in for the control socket (issue: a uid-1000 child
replaced root's socket in a 0777 directory and root's CLI believed it;
a planted lock symlink made root create a file; root's CLI fell through
to another user's /tmp/supervisor-UID/)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.control._ctl import ctl, row, wait_status, write_config
from tests.pid1 import SUPERVISOR, Supervisor

_IMPOSTOR = Path(__file__).with_name("impostor.py")
_SYSTEM_PYTHON = "/usr/bin/python3"  # readable by any user, unlike a venv under /root
_UNPRIVILEGED = 1000

pytestmark = pytest.mark.skipif(os.getuid() != 0, reason="runs a child as another user: needs root")


@pytest.fixture
def shared() -> Iterator[Path]:
    """A directory like an ``emptyDir``: root's, mode 0777, not sticky
    (and outside pytest's 0700 tmp tree, so the other user can reach it)."""
    path = Path(tempfile.mkdtemp(prefix="sup-shared-", dir="/tmp"))
    path.chmod(0o777)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _as_user(uid: int, *argv: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        list(argv), user=uid, group=uid, extra_groups=[], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def _impostor(uid: int, path: Path) -> tuple[subprocess.Popen[str], list[str]]:
    """Start the impostor as ``uid``; returns it and its lines up to
    ``listening`` (or its end)."""
    proc = _as_user(uid, _SYSTEM_PYTHON, str(_IMPOSTOR), str(path))
    assert proc.stdout is not None
    lines = []
    for line in proc.stdout:
        lines.append(line.strip())
        if line.strip() == "listening":
            break
    return proc, lines


def _end(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait(10)


def _config(tmp_path: Path) -> str:
    return write_config(
        tmp_path,
        """
        processes:
          - name: app
            main: true
            command: [sleep, "120"]
          - name: worker
            command: [sleep, "120"]
        """,
    )


def test_another_user_can_neither_replace_roots_socket_nor_be_believed(tmp_path: Path, shared: Path) -> None:
    sock = shared / "control.sock"
    env = {"SUPERVISOR_SOCKET": str(sock)}
    with Supervisor(["-c", _config(tmp_path)], user_namespace=False, env=env) as sup:
        wait_status(sup, lambda a: row(a, "worker")["state"] == "running")
        # The directory is root's and everyone's: the supervisor made it sticky.
        assert shared.stat().st_mode & 0o7777 == 0o1777
        impostor, lines = _impostor(_UNPRIVILEGED, sock)
        try:
            assert lines[0] == "unlink: Operation not permitted", lines
            assert lines[-1] == "bind: Address already in use", lines
        finally:
            _end(impostor)
        result = ctl(sup, "stop", "worker")
        assert result.returncode == 0 and result.stdout.startswith("worker stopped ("), result
        sup.signal(signal.SIGTERM)
        assert sup.wait() == 143
    # No supervisor now; the other user serves its own socket at the path.
    impostor, lines = _impostor(_UNPRIVILEGED, sock)
    try:
        assert lines[-1] == "listening", lines
        for args in (("health",), ("status",), ("stop", "app")):
            result = ctl(None, *args, socket=str(sock))
            assert result.returncode == 1, result
            assert result.stdout == "", result
            assert result.stderr == (
                f"supervisor {args[0]}: {sock} is served by uid {_UNPRIVILEGED}, not by root or by you (uid 0): "
                "not a supervisor to trust; is someone else's program listening there?\n"
            )
    finally:
        _end(impostor)


def test_a_planted_lock_link_is_not_followed(tmp_path: Path, shared: Path) -> None:
    target = tmp_path / "created-by-root"  # where the other user cannot write itself
    planted = _as_user(_UNPRIVILEGED, "ln", "-s", str(target), str(shared / "control.sock.lock"))
    assert planted.wait(10) == 0
    env = {"SUPERVISOR_SOCKET": str(shared / "control.sock")}
    with Supervisor(["-c", _config(tmp_path)], user_namespace=False, env=env) as sup:
        sup.wait_for(r"no control socket: .*control\.sock: ")
        assert ctl(sup, "status").returncode == 1
        assert not target.exists() and not target.is_symlink()
        sup.signal(signal.SIGTERM)
        sup.wait()
    assert not target.exists()


def test_roots_cli_does_not_fall_through_to_another_users_directory() -> None:
    uid = 54321  # no account: a directory no other test makes
    directory = Path(f"/tmp/supervisor-{uid}")
    if directory.exists():
        shutil.rmtree(directory)
    directory.mkdir(mode=0o700)
    os.chown(directory, uid, uid)
    impostor, lines = _impostor(uid, directory / "control.sock")
    try:
        assert lines[-1] == "listening", lines
        env = {key: value for key, value in os.environ.items() if key != "SUPERVISOR_SOCKET"}
        result = subprocess.run(
            [SUPERVISOR, "health"],
            capture_output=True,
            text=True,
            env=env,
            timeout=30,
            check=False,
        )
        assert result.returncode == 1, result
        assert result.stdout == ""
        assert f"supervisor-{uid}" not in result.stderr
    finally:
        _end(impostor)
        shutil.rmtree(directory, ignore_errors=True)
