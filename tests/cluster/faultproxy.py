"""A fault-injecting HTTPS proxy in front of the real kube-apiserver.

The plugin is pointed at the proxy instead of the server; every request is
forwarded (over a TLS connection of its own, with the client's bearer token)
and answered with the real server's answer, unless a ``Rule`` matches it:

    proxy = FaultProxy(plane).start()
    proxy.fail("/endpointslices$", 403)                 # RBAC says no
    proxy.fail("/endpointslices$", 500, watch=True)     # only the watch fails
    proxy.slow("/pods/web-0$", 20)                      # hold the request 20 s
    proxy.add(Rule("/leases/", method="PUT", close=True, times=1))  # connection dropped
    proxy.add(Rule("/endpointslices$", watch=True, gone=True))      # watch: ERROR 410 Expired
    proxy.end_watches()                                 # the server ends open watches
    proxy.stop(); proxy.start()                         # connection refused meanwhile

``requests`` records each request (method, path, query, JSON body, status,
and when its answer started) for the tests to check what the plugin sent.
Client certificates cannot be forwarded, so clients authenticate with tokens.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import re
import socket
import ssl
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._controlplane import ControlPlane

__all__ = ["FaultProxy", "ProxiedRequest", "Rule"]

_HOP_HEADERS = {"connection", "keep-alive", "transfer-encoding", "content-length", "host", "upgrade"}


@dataclass
class Rule:
    """What to do with the requests whose path matches ``path`` (a regex,
    searched): ``status`` answers that code (a Status body) instead of
    forwarding, ``delay`` holds the request first, ``close`` drops the
    connection without an answer, ``gone`` answers a watch as the server does
    when its resourceVersion is too old (200, one ERROR event with code 410).
    ``watch`` limits it to watch (True) or other (False) requests; ``times``
    to the first N matches.  ``fired`` counts the matches."""

    path: str
    method: str | None = None
    watch: bool | None = None
    status: int | None = None
    delay: float = 0.0
    close: bool = False
    gone: bool = False
    times: int | None = None
    fired: int = 0

    def matches(self, method: str, path: str, watching: bool) -> bool:
        if self.times is not None and self.fired >= self.times:
            return False
        if self.method is not None and self.method != method:
            return False
        if self.watch is not None and self.watch != watching:
            return False
        return re.search(self.path, path) is not None


@dataclass
class ProxiedRequest:
    method: str
    path: str
    query: dict[str, str]
    body: Any
    status: int | None = None
    at: float = 0.0  # time.monotonic() when the answer started (or the fault hit)


def status_body(code: int, message: str, reason: str = "") -> bytes:
    reasons = {403: "Forbidden", 404: "NotFound", 409: "Conflict", 410: "Expired", 500: "InternalError"}
    return json.dumps(
        {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": message,
            "reason": reason or reasons.get(code, ""),
            "code": code,
        }
    ).encode()


@dataclass
class FaultProxy:
    plane: ControlPlane
    rules: list[Rule] = field(default_factory=list)
    requests: list[ProxiedRequest] = field(default_factory=list)
    port: int = 0

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        # Open watch streams: the client's socket and the upstream one.
        self._streams: set[tuple[socket.socket, socket.socket]] = set()
        leaf = self.plane.pki
        self._serving = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self._serving.load_cert_chain(str(leaf.serving_cert), str(leaf.serving_key))
        self._upstream = self.plane.ssl_context()

    # -- lifecycle -------------------------------------------------------------

    def start(self) -> FaultProxy:
        proxy = self

        class Handler(_Handler):
            owner = proxy

        server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler, bind_and_activate=False)
        server.daemon_threads = True
        server.allow_reuse_address = True
        server.server_bind()
        server.server_activate()
        server.socket = self._serving.wrap_socket(server.socket, server_side=True)
        self.port = server.server_address[1]
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True, name="fault-proxy")
        self._thread.start()
        return self

    def stop(self) -> None:
        """Close the listener (connections are refused from now on) and every open stream."""
        if self._server is None:
            return
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(5)
        self._server = None
        self.end_watches(abruptly=True)

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    # -- faults ----------------------------------------------------------------

    def add(self, rule: Rule) -> Rule:
        with self._lock:
            self.rules.append(rule)
        return rule

    def fail(self, path: str, status: int, **match: Any) -> Rule:
        return self.add(Rule(path, status=status, **match))

    def slow(self, path: str, seconds: float, **match: Any) -> Rule:
        return self.add(Rule(path, delay=seconds, **match))

    def clear(self) -> None:
        with self._lock:
            self.rules.clear()

    def end_watches(self, *, abruptly: bool = False) -> int:
        """End every open watch stream now: as a server ending its watches
        does (the response ends properly), or ``abruptly`` (the connection
        drops mid-response, as when a load balancer or the server dies)."""
        with self._lock:
            streams, self._streams = set(self._streams), set()
        for client, upstream in streams:
            for sock in (client, upstream) if abruptly else (upstream,):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
        return len(streams)

    @property
    def open_watches(self) -> int:
        with self._lock:
            return len(self._streams)

    def requests_matching(self, method: str, path: str) -> list[ProxiedRequest]:
        with self._lock:
            return [r for r in self.requests if r.method == method and re.search(path, r.path)]

    def _rule_for(self, method: str, path: str, watching: bool) -> Rule | None:
        with self._lock:
            for rule in self.rules:
                if rule.matches(method, path, watching):
                    rule.fired += 1
                    return rule
        return None

    def _record(self, request: ProxiedRequest) -> None:
        with self._lock:
            self.requests.append(request)

    def _stream_opened(self, pair: tuple[socket.socket, socket.socket]) -> None:
        with self._lock:
            self._streams.add(pair)

    def _stream_closed(self, pair: tuple[socket.socket, socket.socket]) -> None:
        with self._lock:
            self._streams.discard(pair)


class _Handler(BaseHTTPRequestHandler):
    owner: FaultProxy
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self._proxy()

    do_POST = do_PUT = do_PATCH = do_DELETE = do_GET

    def _proxy(self) -> None:
        url = urllib.parse.urlsplit(self.path)
        query = dict(urllib.parse.parse_qsl(url.query))
        watching = query.get("watch") in ("true", "1")
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        body: Any = None
        if raw:
            with contextlib.suppress(ValueError):
                body = json.loads(raw)
        record = ProxiedRequest(self.command, url.path, query, body)
        self.owner._record(record)
        rule = self.owner._rule_for(self.command, url.path, watching)
        if rule is not None and rule.delay:
            time.sleep(rule.delay)
        if rule is not None and (rule.close or rule.status is not None or rule.gone):
            self._fault(rule, record)
            return
        self._forward(raw, record, watching)

    def _fault(self, rule: Rule, record: ProxiedRequest) -> None:
        record.at = time.monotonic()
        if rule.close:
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)
            return
        if rule.gone:
            record.status = 200
            event = {"type": "ERROR", "object": json.loads(status_body(410, "too old resource version"))}
            self._send_head(200, [("Content-Type", "application/json")], chunked=True)
            self._chunk(json.dumps(event).encode() + b"\n")
            self._chunk(b"")
            return
        assert rule.status is not None
        record.status = rule.status
        payload = status_body(rule.status, f"injected by the test proxy: HTTP {rule.status}")
        self._send_head(rule.status, [("Content-Type", "application/json")], length=len(payload))
        self.wfile.write(payload)

    def _forward(self, raw: bytes, record: ProxiedRequest, watching: bool) -> None:
        plane = self.owner.plane
        upstream = http.client.HTTPSConnection("127.0.0.1", plane.port, context=self.owner._upstream, timeout=None)
        headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_HEADERS}
        try:
            upstream.request(self.command, self.path, body=raw or None, headers=headers)
            response = upstream.getresponse()
        except OSError:
            upstream.close()
            payload = status_body(502, "the test proxy could not reach kube-apiserver")
            record.status, record.at = 502, time.monotonic()
            self._send_head(502, [("Content-Type", "application/json")], length=len(payload))
            self.wfile.write(payload)
            return
        record.status, record.at = response.status, time.monotonic()
        passed = [(k, v) for k, v in response.getheaders() if k.lower() not in _HOP_HEADERS]
        pair = (self.connection, upstream.sock)
        try:
            if not watching:
                payload = response.read()
                self._send_head(response.status, passed, length=len(payload))
                self.wfile.write(payload)
                return
            self.owner._stream_opened(pair)
            self._send_head(response.status, passed, chunked=True)
            while True:
                try:
                    data = response.read1(65536)
                except http.client.IncompleteRead:
                    data = b""  # the upstream side was shut down: end the response properly
                if not data:
                    break
                self._chunk(data)
            self._chunk(b"")
        except OSError:
            self.close_connection = True
        finally:
            self.owner._stream_closed(pair)
            upstream.close()

    def _send_head(
        self, status: int, headers: list[tuple[str, str]], *, length: int | None = None, chunked: bool = False
    ) -> None:
        self.send_response_only(status)
        for key, value in headers:
            self.send_header(key, value)
        if chunked:
            self.send_header("Transfer-Encoding", "chunked")
        else:
            self.send_header("Content-Length", str(length or 0))
        self.end_headers()

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()
