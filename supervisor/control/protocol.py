"""The control protocol: newline-delimited JSON over a Unix stream socket.

Why JSON lines and not HTTP over the socket: a request is one line and an
answer is one line (``logs --follow`` is simply more lines), so any tool can
speak it without an HTTP library — ``socat``, ``nc -U``, five lines of any
language — and the answers go straight into ``jq``.  HTTP would add framing
(chunked encoding for a follow) for nothing the socket needs; the kubelet's
HTTP needs are served by the separate probe listener.

A request::

    {"command": "status"}
    {"command": "stop", "names": ["worker"]}
    {"command": "signal", "name": "worker", "signal": "HUP"}
    {"command": "logs", "name": "worker", "lines": 20, "follow": true}
    {"command": "health", "level": "ready"}
    {"command": "replan", "dry_run": true}

An answer: ``{"ok": true, ...}`` or ``{"ok": false, "error": "one line"}``.
``logs`` first sends one ``{"line": ..., "process": ..., "stream": ...,
"time": ...}`` object per line, then (without ``follow``) its final answer.
One request per connection; the server closes it after the answer.

Who may connect: the socket is created with mode 0600 and every connection
is checked with ``SO_PEERCRED``: only root and the supervisor's own uid are
served, whatever the file's mode has been changed to.

Whom a client trusts: the same check the other way round.  A socket path
is only a name, and whoever can write to its directory can put another
socket there; so the client asks the kernel who is listening and talks
only to root or to its own uid (``server_trusted``).  The server, for its
part, refuses a directory that belongs to another user, never follows a
symbolic link for its lock, and makes a directory of its own that everyone
may write to sticky, so that no other user can remove its socket.
"""

from __future__ import annotations

import os
import socket
import stat
import struct
from typing import Protocol

__all__ = [
    "COMMANDS",
    "MAX_REQUEST",
    "SOCKET_ENV",
    "client_candidates",
    "default_socket",
    "open_lock",
    "peer_allowed",
    "peer_uid",
    "prepare_directory",
    "server_trusted",
]

SOCKET_ENV = "SUPERVISOR_SOCKET"
SOCKET_NAME = "control.sock"
RUN_DIR = "/run/supervisor"
COMMANDS = ("status", "start", "stop", "restart", "signal", "logs", "health", "replan")
# A request is a small JSON object; anything longer is not one.
MAX_REQUEST = 64 * 1024


def _tmp_dir(uid: int) -> str:
    return f"/tmp/supervisor-{uid}"


def default_socket(uid: int | None = None) -> str:
    """Where the supervisor puts its socket when the configuration does not
    say: ``$SUPERVISOR_SOCKET``, else /run/supervisor/ when it can create
    that (root, or an image that made it writable), else a private
    /tmp/supervisor-UID/ (the image's non-root user)."""
    env = os.environ.get(SOCKET_ENV)
    if env:
        return env
    uid = os.getuid() if uid is None else uid
    if _usable_directory(RUN_DIR, uid):
        return os.path.join(RUN_DIR, SOCKET_NAME)
    return os.path.join(_tmp_dir(uid), SOCKET_NAME)


def _usable_directory(path: str, uid: int) -> bool:
    try:
        os.makedirs(path, mode=0o755, exist_ok=True)
    except OSError:
        return False
    return os.access(path, os.W_OK | os.X_OK) and os.stat(path).st_uid in (uid, 0)


def client_candidates(uid: int | None = None, pid1_uid: int | None = None) -> list[str]:
    """Where the CLI looks, in order, when neither ``--socket`` nor
    ``$SUPERVISOR_SOCKET`` says: the places ``default_socket`` picks from.
    Never the directory of a user who is neither the CLI's nor PID 1's: a
    socket there is whatever that user chose to serve.  Root also looks in
    the private directory of the user PID 1 runs as (a container whose
    supervisor runs as a non-root user: ``kubectl exec --user 0``)."""
    env = os.environ.get(SOCKET_ENV)
    if env:
        return [env]
    uid = os.getuid() if uid is None else uid
    places = [os.path.join(RUN_DIR, SOCKET_NAME), os.path.join(_tmp_dir(uid), SOCKET_NAME)]
    pid1 = pid1_owner() if pid1_uid is None else pid1_uid
    if uid == 0 and pid1 not in (None, 0):
        places.append(os.path.join(_tmp_dir(pid1), SOCKET_NAME))
    return places


def pid1_owner() -> int | None:
    """The uid PID 1 of this PID namespace runs as (the owner of its /proc
    directory), or None if it cannot be told."""
    try:
        return os.stat("/proc/1").st_uid
    except OSError:
        return None


def prepare_directory(path: str) -> None:
    """Make the socket's directory, or check the one that is there: a
    directory, not a link to one, owned by this uid or by root (a private
    one in /tmp: by this uid).  One that everyone may write to is made
    sticky if it is ours, so that nobody else can remove or rename the
    socket in it.  Raises OSError saying what is wrong."""
    directory = os.path.dirname(path) or "."
    private = directory.startswith("/tmp/")
    os.makedirs(directory, mode=0o700 if private else 0o755, exist_ok=True)
    uid = os.getuid()
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise PermissionError(f"{directory} is not a directory owned by uid {uid} ({exc.strerror})") from None
    try:
        info = os.fstat(fd)
        owners = (uid,) if private else (uid, 0)
        if info.st_uid not in owners:
            whose = f"uid {uid}" if private else f"uid {uid} or root"
            raise PermissionError(f"{directory} is not a directory owned by {whose}")
        others_write = info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
        if others_write and not info.st_mode & stat.S_ISVTX and info.st_uid == uid:
            os.fchmod(fd, stat.S_IMODE(info.st_mode) | stat.S_ISVTX)
    finally:
        os.close(fd)


def open_lock(path: str) -> int:
    """Open (creating) the lock file ``path``: never through a symbolic link,
    and only a regular file of this uid.  Returns the descriptor."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, 0o600)
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid():
        os.close(fd)
        raise PermissionError(f"{path} is not a file of uid {os.getuid()}")
    return fd


def peer_allowed(peer_uid: int, own_uid: int | None = None) -> bool:
    """Root, and the user the supervisor runs as."""
    own = os.getuid() if own_uid is None else own_uid
    return peer_uid in (0, own)


class _Socket(Protocol):
    """A stdlib socket or a trio one."""

    def getsockopt(self, level: int, option: int, buflen: int, /) -> bytes: ...


def peer_uid(sock: _Socket) -> int | None:
    """The uid of the process at the other end of a Unix socket, as the
    kernel recorded it at ``connect``/``listen``; None if it cannot say."""
    try:
        raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    except OSError:
        return None
    _pid, uid, _gid = struct.unpack("3i", raw)
    return int(uid)


def server_trusted(
    server_uid: int, path: str, *, explicit: bool, own_uid: int | None = None, pid1_uid: int | None = None
) -> bool:
    """Whether a client of ``own_uid`` may believe the server of ``server_uid``
    at ``path``: root or itself; and, in a directory only the server's uid
    may write to and that it owns, the server's uid when the user named the
    path (``--socket``, ``$SUPERVISOR_SOCKET``) or, for root, when it is the
    user PID 1 runs as — a process of that uid can signal and trace PID 1
    already, so believing it gives it nothing new."""
    own = os.getuid() if own_uid is None else own_uid
    if server_uid in (0, own):
        return True
    if not explicit:
        pid1 = pid1_owner() if pid1_uid is None else pid1_uid
        if own != 0 or server_uid != pid1 or path != os.path.join(_tmp_dir(server_uid), SOCKET_NAME):
            return False
    try:
        info = os.lstat(os.path.dirname(path) or ".")
    except OSError:
        return False
    return stat.S_ISDIR(info.st_mode) and info.st_uid == server_uid and not info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
