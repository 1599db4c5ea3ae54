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
"""

from __future__ import annotations

import contextlib
import os
import stat

__all__ = [
    "COMMANDS",
    "MAX_REQUEST",
    "SOCKET_ENV",
    "client_candidates",
    "default_socket",
    "peer_allowed",
    "prepare_directory",
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


def client_candidates(uid: int | None = None) -> list[str]:
    """Where the CLI looks, in order, when neither ``--socket`` nor
    ``$SUPERVISOR_SOCKET`` says: the places ``default_socket`` picks from.
    Root also finds a non-root supervisor's socket in /tmp."""
    env = os.environ.get(SOCKET_ENV)
    if env:
        return [env]
    uid = os.getuid() if uid is None else uid
    found = [os.path.join(RUN_DIR, SOCKET_NAME), os.path.join(_tmp_dir(uid), SOCKET_NAME)]
    if uid == 0:
        with contextlib.suppress(OSError):
            for entry in sorted(os.listdir("/tmp")):
                if entry.startswith("supervisor-") and entry[len("supervisor-") :].isdigit():
                    path = os.path.join("/tmp", entry, SOCKET_NAME)
                    if path not in found:
                        found.append(path)
    return found


def prepare_directory(path: str) -> None:
    """Make the socket's directory; a private one in /tmp must be ours and
    not a link someone else planted.  Raises OSError saying what is wrong."""
    directory = os.path.dirname(path) or "."
    private = directory.startswith("/tmp/")
    os.makedirs(directory, mode=0o700 if private else 0o755, exist_ok=True)
    info = os.lstat(directory)
    if private and (not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid()):
        raise PermissionError(f"{directory} is not a directory owned by uid {os.getuid()}")


def peer_allowed(peer_uid: int, own_uid: int | None = None) -> bool:
    """Root, and the user the supervisor runs as."""
    own = os.getuid() if own_uid is None else own_uid
    return peer_uid in (0, own)
