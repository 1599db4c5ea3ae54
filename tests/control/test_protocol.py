"""Where the socket goes and who may use it: the rules both sides share."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

import pytest

from supervisor.control import protocol


@pytest.fixture
def private_tmp(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A stand-in for /tmp and /run/supervisor that the test owns."""
    root = Path(tempfile.mkdtemp(prefix="sup-proto-"))
    monkeypatch.setattr(protocol, "_tmp_dir", lambda uid: f"{root}/tmp/supervisor-{uid}")
    monkeypatch.setattr(protocol, "RUN_DIR", f"{root}/run/supervisor")
    monkeypatch.delenv(protocol.SOCKET_ENV, raising=False)
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_the_environment_names_the_socket_for_both_sides(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(protocol.SOCKET_ENV, "/somewhere/ctl.sock")
    assert protocol.default_socket() == "/somewhere/ctl.sock"
    assert protocol.client_candidates() == ["/somewhere/ctl.sock"]


def test_run_dir_when_it_can_be_made_else_a_private_tmp_dir(private_tmp: Path) -> None:
    assert protocol.default_socket(uid=0) == f"{private_tmp}/run/supervisor/control.sock"
    shutil.rmtree(private_tmp / "run")
    (private_tmp / "run").write_text("not a directory: /run/supervisor cannot be made")
    assert protocol.default_socket(uid=65532) == f"{private_tmp}/tmp/supervisor-65532/control.sock"


def test_a_private_directory_must_be_ours(tmp_path: Path) -> None:
    theirs = Path(tempfile.mkdtemp(prefix="supervisor-test-", dir="/tmp"))
    try:
        os.chown(theirs, 65534, 65534)
        with pytest.raises(PermissionError, match=f"{theirs} is not a directory owned by uid 0"):
            protocol.prepare_directory(f"{theirs}/control.sock")
        link = Path(f"{theirs}-link")
        link.symlink_to(tmp_path)
        try:
            with pytest.raises(PermissionError, match="is not a directory owned by"):
                protocol.prepare_directory(f"{link}/control.sock")
        finally:
            link.unlink()
    finally:
        shutil.rmtree(theirs)


def test_the_cli_never_looks_in_another_users_directory(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(protocol.SOCKET_ENV, raising=False)
    made = Path("/tmp/supervisor-65532")
    existed = made.exists()
    made.mkdir(exist_ok=True)
    try:
        assert protocol.client_candidates(uid=0) == ["/run/supervisor/control.sock", "/tmp/supervisor-0/control.sock"]
        assert "/tmp/supervisor-65532/control.sock" not in protocol.client_candidates(uid=1000)
    finally:
        if not existed:
            made.rmdir()


def test_whom_a_client_trusts(tmp_path: Path) -> None:
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o700)
    os.chown(theirs, 65532, 65532)
    path = f"{theirs}/control.sock"
    assert protocol.server_trusted(0, path, explicit=False, own_uid=1000)
    assert protocol.server_trusted(1000, path, explicit=False, own_uid=1000)
    assert not protocol.server_trusted(65532, path, explicit=False, own_uid=0)
    # Named by the user, in a directory only the server's uid can write to.
    assert protocol.server_trusted(65532, path, explicit=True, own_uid=0)
    assert not protocol.server_trusted(1000, path, explicit=True, own_uid=0)
    theirs.chmod(0o777)
    assert not protocol.server_trusted(65532, path, explicit=True, own_uid=0)


def test_root_believes_the_user_pid1_runs_as_in_that_users_private_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A container whose supervisor runs as 65532: `kubectl exec --user 0 POD
    # -- supervisor status` finds and believes it without --socket.
    monkeypatch.delenv(protocol.SOCKET_ENV, raising=False)
    assert protocol.client_candidates(0, pid1_uid=65532)[-1] == "/tmp/supervisor-65532/control.sock"
    assert not any("65532" in place for place in protocol.client_candidates(1000, pid1_uid=65532))
    assert not any("supervisor-0" in place for place in protocol.client_candidates(0, pid1_uid=0)[2:])
    private = tmp_path / "supervisor-65532"
    private.mkdir(mode=0o700)
    os.chown(private, 65532, 65532)
    with mock.patch.object(protocol, "_tmp_dir", lambda uid: str(tmp_path / f"supervisor-{uid}")):
        path = protocol.client_candidates(0, pid1_uid=65532)[-1]
        assert protocol.server_trusted(65532, path, explicit=False, own_uid=0, pid1_uid=65532)
        # Not another user than PID 1's, not a client other than root, not
        # a directory others may write to.
        assert not protocol.server_trusted(65532, path, explicit=False, own_uid=0, pid1_uid=1000)
        assert not protocol.server_trusted(65532, path, explicit=False, own_uid=1000, pid1_uid=65532)
        private.chmod(0o733)
        assert not protocol.server_trusted(65532, path, explicit=False, own_uid=0, pid1_uid=65532)


def test_peers() -> None:
    assert protocol.peer_allowed(0, own_uid=65532)
    assert protocol.peer_allowed(65532, own_uid=65532)
    assert not protocol.peer_allowed(1000, own_uid=65532)
