"""The control socket's server, inside the orchestrator (see ``protocol``).

One trio task per connection; a connection carries one request.  The peer's
credentials are checked before the request is even read, so a refused
client learns nothing but the refusal.  Every wait on a client is bounded
(reading its request, writing to it), so no client can pin a task, and the
server's tasks end with the orchestrator: they never delay a shutdown.

Even an allowed client is held to bounds: at most ``MAX_CONNECTIONS``
connections and ``MAX_FOLLOWERS`` ``logs -f`` at once (one more is told so
and closed), a request nested too deeply for the JSON parser is refused
like any other bad request, and a client that hangs up, a follower above
all, is no error.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import trio

from ..health.accept import accept_connections
from ..runtime.capture import captured
from .logs import LogLine, LogRing
from .operations import ControlError, Operations
from .protocol import COMMANDS, MAX_REQUEST, open_lock, peer_allowed, peer_uid, prepare_directory

__all__ = ["MAX_CONNECTIONS", "MAX_FOLLOWERS", "ControlServer"]

log = logging.getLogger("supervisor.control")

_READ_TIMEOUT = 5.0  # for the request line
_WRITE_TIMEOUT = 10.0  # for each answer line: a client that stopped reading is dropped
_FOLLOW_BUFFER = 1024  # lines a slow `logs -f` client may fall behind before it loses some
_DEFAULT_LINES = 10
_REFUSE_TIMEOUT = 0.2  # for telling a client over the limit so
_BACKLOG = 128  # bursts of exec probes and scripts wait here rather than get EAGAIN
MAX_CONNECTIONS = 64
"""Connections served at once."""
MAX_FOLLOWERS = 16
"""``logs -f`` clients at once."""
# What a client that went away looks like, wherever it is noticed.
_GONE = (trio.BrokenResourceError, trio.ClosedResourceError, trio.TooSlowError)


class ControlServer:
    def __init__(self, path: str, operations: Operations, ring: LogRing) -> None:
        self.path = path
        self.operations = operations
        self.ring = ring
        self._uid = os.getuid()
        self._inode = -1
        self._lock_fd: int | None = None
        self._connections = 0
        self._followers = 0

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Bind (replacing a stale socket), then serve until cancelled.  A
        socket that cannot be made is a warning, not a failed pod: the
        workload matters more than its remote control."""
        try:
            sock = self._bind()
        except OSError as exc:
            self._unlock()
            log.warning("no control socket: %s: %s", self.path, exc.strerror or exc)
            task_status.started()
            return
        log.debug("control socket at %s", self.path)
        try:
            listener = trio.SocketListener(sock)
            task_status.started()
            async with trio.open_nursery() as nursery:
                connections = accept_connections(listener, what="control socket", log=log, free_one=lambda: False)
                async for stream in connections:
                    if self._connections >= MAX_CONNECTIONS:
                        await _refuse(stream, f"busy: {MAX_CONNECTIONS} connections are open; try again")
                        continue
                    self._connections += 1
                    nursery.start_soon(self._handle, stream)
        finally:
            with contextlib.suppress(OSError):
                if os.lstat(self.path).st_ino == self._inode:
                    os.unlink(self.path)
            self._unlock()

    def _bind(self) -> trio.socket.SocketType:
        prepare_directory(self.path)
        self._lock_or_raise()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)  # stale: its supervisor is gone (we hold the lock)
        plain = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        # 0600 from the moment it exists: bind() applies the umask.  A
        # plain, synchronous bind, so that no other task (a spawn, which
        # would inherit the umask) runs while it is changed.
        old = os.umask(0o177)
        try:
            plain.bind(self.path)
        except OSError:
            plain.close()
            raise
        finally:
            os.umask(old)
        # (No chmod: the umask made it 0600, and a chmod by path would follow
        # a link that someone with write access to the directory put there.)
        self._inode = os.lstat(self.path).st_ino
        plain.listen(_BACKLOG)
        return trio.socket.from_stdlib_socket(plain)

    def _lock_or_raise(self) -> None:
        """Hold ``PATH.lock`` for the life of the orchestrator, so that two
        supervisors sharing a directory never take each other's socket."""
        import fcntl

        lock = self.path + ".lock"
        while True:
            fd = open_lock(lock)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                raise OSError(0, "in use by another supervisor") from None
            # Its holder removes the file when done (see _unlock): a lock
            # taken on a file no longer at the path is no lock; try again.
            try:
                if os.lstat(lock).st_ino == os.fstat(fd).st_ino:
                    break
            except FileNotFoundError:
                pass
            os.close(fd)
        self._lock_fd = fd

    def _unlock(self) -> None:
        """Remove the lock file while still holding it, then let go: nothing
        is left behind, and a supervisor that opened the old file finds it
        gone (``_lock_or_raise``)."""
        fd, self._lock_fd = self._lock_fd, None
        if fd is None:
            return
        with contextlib.suppress(OSError):
            if os.lstat(self.path + ".lock").st_ino == os.fstat(fd).st_ino:
                os.unlink(self.path + ".lock")
        os.close(fd)

    # -- one connection ---------------------------------------------------------

    async def _handle(self, stream: trio.SocketStream) -> None:
        try:
            async with stream:
                await self._serve_one(stream)
        except Exception as exc:
            if not _client_gone(exc):
                # A bug answering one request must not take the server (or
                # the orchestrator) down with it.
                log.exception("control socket: request failed")
        finally:
            self._connections -= 1

    async def _serve_one(self, stream: trio.SocketStream) -> None:
        send = _sender(stream)
        uid = peer_uid(stream.socket)
        if uid is None or not peer_allowed(uid, self._uid):
            log.warning("control socket: refused a client of uid %s", uid)
            # Its request is read (and ignored) first: closing with unread
            # data would reset the connection, and the client would lose the
            # answer that tells it why.
            await _read_request(stream)
            await send(
                _error(f"permission denied: only root and uid {self._uid} may use this socket (you are uid {uid})")
            )
            return
        request = await _read_request(stream)
        if not isinstance(request, dict):
            await send(_error(request if isinstance(request, str) else "a request is one JSON object on one line"))
            return
        try:
            if request.get("command") == "logs":
                await self._logs(request, stream, send)
                return
            answer = await self._dispatch(request)
        except ControlError as exc:
            await send(_error(str(exc)))
            return
        await send(answer)

    async def _dispatch(self, request: dict[str, Any]) -> dict[str, object]:
        ops = self.operations
        command = request.get("command")
        if command == "status":
            return ops.status()
        if command in ("start", "stop", "restart"):
            names = _names(request)
            action = {"start": ops.start, "stop": ops.stop, "restart": ops.restart}[command]
            return {"ok": True, "messages": await action(names)}
        if command == "signal":
            name, signal_text = request.get("name"), request.get("signal")
            if not isinstance(name, str) or not isinstance(signal_text, str | int):
                raise ControlError('signal needs "name" and "signal"')
            return {"ok": True, "messages": [ops.signal(name, str(signal_text))]}
        if command == "replan":
            return await ops.replan(dry_run=request.get("dry_run") is True)
        if command == "health":
            level = request.get("level", "ready")
            if level not in ("alive", "ready"):
                raise ControlError(f"unknown health level {level!r}: use alive or ready")
            verdict = ops.health(level)
            return {"ok": True, "healthy": verdict.ok, "level": level, "reasons": list(verdict.reasons)}
        raise ControlError(f"unknown command {command!r} (commands: {', '.join(COMMANDS)})")

    async def _logs(
        self, request: dict[str, Any], stream: trio.SocketStream, send: Callable[[object], Awaitable[None]]
    ) -> None:
        ask = _LogsRequest.parse(request)
        if ask.name is not None:
            self._check_captured(ask.name)
        if ask.follow:
            if self._followers >= MAX_FOLLOWERS:
                raise ControlError(f"busy: {MAX_FOLLOWERS} clients follow the logs already; try again later")
            self._followers += 1
            try:
                await self._follow(ask, stream, send)
            finally:
                self._followers -= 1
            return
        for line in self.ring.recent(ask.name, ask.lines, since=ask.since):
            await send(line.as_dict())
        await send({"ok": True})

    def _check_captured(self, name: str) -> None:
        (process,) = self.operations.lookup([name])
        if not captured(process.spec):
            raise ControlError(
                f"{name}'s output is not captured: it writes to the container's stdout and stderr directly "
                "(a command after --, or a terminal); see kubectl logs, or run it from the configuration file"
            )

    async def _follow(
        self, ask: _LogsRequest, stream: trio.SocketStream, send: Callable[[object], Awaitable[None]]
    ) -> None:
        """The backlog, then every new line until the client hangs up.  A
        client that falls more than ``_FOLLOW_BUFFER`` lines behind loses
        lines, and is told how many, instead of holding up the pumps."""
        # Subscribe before sending the backlog, so that no line falls between.
        sender, receiver = trio.open_memory_channel[LogLine](_FOLLOW_BUFFER)
        dropped = 0

        def on_line(line: LogLine) -> None:
            nonlocal dropped
            if ask.name is None or line.process == ask.name:
                try:
                    sender.send_nowait(line)
                except trio.WouldBlock:
                    dropped += 1

        unsubscribe = self.ring.follow(on_line)
        try:
            for line in self.ring.recent(ask.name, ask.lines, since=ask.since):
                await send(line.as_dict())
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_cancel_on_eof, stream, nursery.cancel_scope)
                async for line in receiver:
                    if dropped:
                        await send({"dropped": dropped})
                        dropped = 0
                    await send(line.as_dict())
        finally:
            unsubscribe()


@dataclass(frozen=True, slots=True)
class _LogsRequest:
    """A ``logs`` request, checked: whose lines, how many, and whether to follow."""

    name: str | None
    lines: int
    follow: bool
    since: float | None = None  # seconds since the epoch: only lines from then on

    @classmethod
    def parse(cls, request: dict[str, Any]) -> _LogsRequest:
        name = request.get("name")
        if name is not None and not isinstance(name, str):
            raise ControlError('"name" must be a process name')
        count = request.get("lines", _DEFAULT_LINES)
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            raise ControlError('"lines" must be a number of lines, 0 or more')
        since = request.get("since")
        if since is not None and (not isinstance(since, int | float) or isinstance(since, bool)):
            raise ControlError('"since" must be a time in seconds since the epoch')
        return cls(name, count, request.get("follow", False) is True, since)


def _sender(stream: trio.SocketStream) -> Callable[[object], Awaitable[None]]:
    async def send(message: object) -> None:
        import json  # see _read_request

        data = (json.dumps(message, separators=(",", ":")) + "\n").encode()
        with trio.fail_after(_WRITE_TIMEOUT):
            await stream.send_all(data)

    return send


async def _cancel_on_eof(stream: trio.SocketStream, scope: trio.CancelScope) -> None:
    with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
        while await stream.receive_some(4096):
            pass
    scope.cancel()


async def _read_request(stream: trio.SocketStream) -> dict[str, Any] | str:
    data = b""
    with trio.move_on_after(_READ_TIMEOUT):
        while b"\n" not in data:
            chunk = await stream.receive_some(4096)
            if not chunk:
                break
            data += chunk
            if len(data) > MAX_REQUEST:
                return f"request longer than {MAX_REQUEST} bytes"
    line = data.split(b"\n", 1)[0].strip()
    if not line:
        return "empty request: send one JSON object on one line"
    # On the first request: an idle orchestrator does not carry the json
    # package (about 0.2 MiB with its C parser) for a socket rarely used.
    import json

    try:
        request = json.loads(line)
    except (ValueError, UnicodeDecodeError) as exc:
        return f"not JSON: {exc}"
    except RecursionError:
        return "not a request: nested too deeply"
    if not isinstance(request, dict):
        return 'a request is a JSON object such as {"command": "status"}'
    return request


async def _refuse(stream: trio.SocketStream, message: str) -> None:
    """Tell a client over a limit why, and close.  Its request is not read:
    waiting for it would let idle connections slow the accepting down (the
    answer is queued before the close, where the client reads it)."""
    import json  # see _read_request

    with trio.move_on_after(_REFUSE_TIMEOUT), contextlib.suppress(*_GONE):
        await stream.send_all((json.dumps(_error(message)) + "\n").encode())
    await stream.aclose()


def _client_gone(exc: BaseException) -> bool:
    """Whether ``exc`` only says that the client went away or stopped
    reading (also from inside a nursery, as an exception group)."""
    if isinstance(exc, BaseExceptionGroup):
        return all(_client_gone(inner) for inner in exc.exceptions)
    return isinstance(exc, _GONE)


def _names(request: dict[str, Any]) -> list[str]:
    names = request.get("names")
    if not isinstance(names, list) or not all(isinstance(name, str) for name in names):
        raise ControlError('"names" must be a list of process names')
    return names


def _error(message: str) -> dict[str, object]:
    return {"ok": False, "error": message}
