"""The probe listener: ``GET /livez``, ``/readyz`` and ``/metrics`` over HTTP.

For the kubelet's ``httpGet`` probes: 200 with ``alive: ok`` / ``ready: ok``,
or 503 with the failing checks and processes named one per line.  It keeps
answering through the shutdown (``/readyz`` then says "shutting down"), so
the kubelet and the Service see the pod leave rather than vanish.

A few lines of HTTP/1.1 by hand: one request per connection, GET and HEAD
only, bounded reads and writes.  A full server library would cost start-up
time and memory for three fixed answers.

The port is often reachable by anyone on the pod network, and what it must
never do is take the pod down with it.  So it holds at most a quarter of
the process's descriptors, and no more than ``MAX_CONNECTIONS``, in
connections: a new one pushes out the oldest (a kubelet
sends its whole request at once and is answered in a moment, so the
connections still open are the ones that send slowly or not at all), a
request's head must arrive within ``_HEAD_TIMEOUT``, and running out of
descriptors pushes out the oldest connection (``accept_connections``).  The descriptors the processes need
(a restart's pipes) stay free however many connections arrive.

A connection waits in the kernel's accept queue, in order of arrival, so
a probe that comes in behind a crowd waits for the crowd: the listener
accepts whatever is waiting in one go (``accept_connections``) and answers
a request that has arrived whole at once, without a task of its own; the
orchestrator raises its soft limit on open files to the hard one at start
(``raise_open_files_limit``), so that the crowd is in the listener's
hands, not in the queue.
"""

from __future__ import annotations

import contextlib
import logging
import os
import resource

import trio

from .accept import accept_connections
from .board import Level
from .metrics import CONTENT_TYPE, PodView, render_metrics

__all__ = ["MAX_CONNECTIONS", "HealthListener"]

log = logging.getLogger("supervisor.health")

MAX_CONNECTIONS = 2048
"""Connections open at once, at most (a probe needs one for a moment); each
costs a few kilobytes."""
_HEAD_LIMIT = 8192
# A kubelet's request is a few hundred bytes in one segment; two seconds is
# plenty on a loaded node and short for a connection that only holds a slot.
_HEAD_TIMEOUT = 2.0
_WRITE_TIMEOUT = 2.0
_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed", 503: "Service Unavailable"}


class HealthListener:
    def __init__(self, address: tuple[str, int], operations: PodView) -> None:
        self.address = address
        self.operations = operations
        # Open connections, oldest first (a dict keeps insertion order).
        self._open: dict[trio.CancelScope, trio.SocketStream] = {}
        self._limit = _connection_limit()

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        host, port = self.address
        try:
            listeners = await trio.open_tcp_listeners(port, host=host)
        except OSError as exc:
            log.warning("no health listener on %s:%d: %s", host, port, exc.strerror or exc)
            task_status.started()
            return
        log.debug("health listener on %s:%d", host, port)
        task_status.started()
        async with trio.open_nursery() as nursery:
            for listener in listeners:
                nursery.start_soon(self._accept_loop, listener, nursery)

    async def _accept_loop(self, listener: trio.SocketListener, nursery: trio.Nursery) -> None:
        connections = accept_connections(listener, what="health listener", log=log, free_one=self._drop_oldest)
        async for stream in connections:
            first = _read_now(stream)
            unsent = None
            if first is not None and _complete(first):
                # A probe as a kubelet sends it: answered at once, so that it
                # does not wait for the tasks of a crowd that arrived before.
                unsent = self._answer_now(stream, first)
                if not unsent:
                    continue
            if len(self._open) >= self._limit:
                self._drop_oldest()
            # Registered here, not when the task first runs, so that a
            # burst of accepts counts every connection at once.
            scope = trio.CancelScope()
            self._open[scope] = stream
            nursery.start_soon(self._handle, stream, scope, first or b"", unsent)

    def _answer_now(self, stream: trio.SocketStream, head: bytes) -> bytes:
        """Answer a request whose head has arrived whole, without waiting;
        returns what did not fit into the socket's buffer (the stream is
        closed when that is nothing)."""
        response = _response(*self.answer(head if len(head) <= _HEAD_LIMIT else None))
        try:
            written = os.write(stream.socket.fileno(), response)
        except BlockingIOError:
            written = 0
        except OSError:
            written = len(response)  # the client is gone: nothing to answer
        if written == len(response):
            stream.socket.close()
        return response[written:]

    def _drop_oldest(self) -> bool:
        for scope, stream in self._open.items():
            del self._open[scope]
            # Closed now, not when its task next runs: a burst of accepts
            # must find the descriptor free.
            stream.socket.close()
            scope.cancel()
            return True
        return False

    async def _handle(
        self, stream: trio.SocketStream, scope: trio.CancelScope, first: bytes, unsent: bytes | None
    ) -> None:
        try:
            with scope:
                async with stream:
                    if unsent is None:
                        await self._serve_one(stream, first)
                    else:
                        with (
                            contextlib.suppress(trio.BrokenResourceError, trio.TooSlowError),
                            trio.fail_after(_WRITE_TIMEOUT),
                        ):
                            await stream.send_all(unsent)
        finally:
            self._open.pop(scope, None)

    async def _serve_one(self, stream: trio.SocketStream, first: bytes) -> None:
        try:
            with trio.fail_after(_HEAD_TIMEOUT):
                head = await _read_head(stream, first)
            status, content_type, body, send_body = self.answer(head)
            with trio.fail_after(_WRITE_TIMEOUT):
                await stream.send_all(_response(status, content_type, body, send_body))
        except (trio.BrokenResourceError, trio.ClosedResourceError, trio.TooSlowError):
            pass
        except Exception:
            log.exception("health listener: request failed")

    def answer(self, head: bytes | None) -> tuple[int, str, str, bool]:
        """(status, content type, body, whether to send the body)."""
        text = "text/plain; charset=utf-8"
        if head is None:
            return 400, text, "bad request\n", True
        parts = head.split(b"\r\n", 1)[0].split()
        if len(parts) != 3 or not parts[2].startswith(b"HTTP/"):
            return 400, text, "bad request\n", True
        method, target = parts[0], parts[1].decode("latin-1")
        if method not in (b"GET", b"HEAD"):
            return 405, text, "only GET and HEAD\n", True
        send_body = method == b"GET"
        path = target.split("?", 1)[0]
        if path in ("/livez", "/readyz"):
            level: Level = "alive" if path == "/livez" else "ready"
            verdict = self.operations.health(level)
            return (200 if verdict.ok else 503), text, verdict.body(level), send_body
        if path == "/metrics":
            return 200, CONTENT_TYPE, render_metrics(self.operations), send_body
        return 404, text, "not found: try /livez, /readyz or /metrics\n", send_body


def _connection_limit() -> int:
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return MAX_CONNECTIONS
    return max(16, min(MAX_CONNECTIONS, soft // 4))


def _complete(data: bytes) -> bool:
    return b"\r\n\r\n" in data or b"\n\n" in data or len(data) > _HEAD_LIMIT


def _read_now(stream: trio.SocketStream) -> bytes | None:
    """What has arrived on a new connection (None: nothing yet, or gone)."""
    try:
        return os.read(stream.socket.fileno(), _HEAD_LIMIT + 1) or None
    except OSError:  # BlockingIOError: nothing yet; a reset: read again in the task
        return None


async def _read_head(stream: trio.SocketStream, data: bytes = b"") -> bytes | None:
    if len(data) > _HEAD_LIMIT:
        return None
    while not _complete(data):
        chunk = b""
        with contextlib.suppress(trio.BrokenResourceError):
            chunk = await stream.receive_some(4096)
        if not chunk:
            return data or None
        data += chunk
        if len(data) > _HEAD_LIMIT:
            return None
    return data


def _response(status: int, content_type: str, body: str, send_body: bool) -> bytes:
    payload = body.encode()
    head = (
        f"HTTP/1.1 {status} {_REASONS[status]}\r\n"
        f"Content-Type: {content_type}\r\n"
        f"Content-Length: {len(payload)}\r\n"
        "Cache-Control: no-store\r\n"
        "Connection: close\r\n\r\n"
    )
    return head.encode() + (payload if send_body else b"")
