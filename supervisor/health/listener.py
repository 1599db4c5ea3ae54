"""The probe listener: ``GET /livez``, ``/readyz`` and ``/metrics`` over HTTP.

For the kubelet's ``httpGet`` probes: 200 with ``alive: ok`` / ``ready: ok``,
or 503 with the failing checks and processes named one per line.  It keeps
answering through the shutdown (``/readyz`` then says "shutting down"), so
the kubelet and the Service see the pod leave rather than vanish.

A few lines of HTTP/1.1 by hand: one request per connection, GET and HEAD
only, bounded reads and writes.  A full server library would cost start-up
time and memory for three fixed answers.
"""

from __future__ import annotations

import contextlib
import logging

import trio

from ..control.operations import Operations
from .board import Level
from .metrics import CONTENT_TYPE, render_metrics

__all__ = ["HealthListener"]

log = logging.getLogger("supervisor.health")

_HEAD_LIMIT = 8192
_TIMEOUT = 5.0
_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed", 503: "Service Unavailable"}


class HealthListener:
    def __init__(self, address: tuple[str, int], operations: Operations) -> None:
        self.address = address
        self.operations = operations

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
        await trio.serve_listeners(self._handle, listeners)

    async def _handle(self, stream: trio.SocketStream) -> None:
        async with stream:
            try:
                with trio.fail_after(_TIMEOUT):
                    head = await _read_head(stream)
                    status, content_type, body, send_body = self.answer(head)
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


async def _read_head(stream: trio.SocketStream) -> bytes | None:
    data = b""
    while b"\r\n\r\n" not in data and b"\n\n" not in data:
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
