"""An HTTPS server that speaks the Kubernetes REST protocol.

Enough of it for the real ``kubernetes`` client (and kubectl) to work against:
bearer-token authentication, namespaced CRUD with resourceVersion conflicts,
lists and chunked watch streams with label and field selectors, bookmarks,
server-side ``timeoutSeconds`` and 410 Expired, and ``Status`` errors in the
exact wire format.  Faults (403, 500, delays, the server going away) can be
injected per method and path so that client error handling is exercised over
real sockets.
"""

from __future__ import annotations

import contextlib
import json
import queue
import re
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import trustme

from ._selectors import SelectorError, parse_field_selector, parse_label_selector
from ._store import RESOURCES, ApiError, Resource, Store, status_body

__all__ = ["Fault", "KubeAPIServer", "Request"]

_CORE = re.compile(
    r"^/api/(?P<version>v1)/(?:namespaces/(?P<ns>[^/]+)/)?"
    r"(?P<plural>[a-z]+)(?:/(?P<name>[^/]+))?(?:/(?P<sub>status))?$"
)
_GROUP = re.compile(
    r"^/apis/(?P<group>[^/]+)/(?P<version>[^/]+)/(?:namespaces/(?P<ns>[^/]+)/)?"
    r"(?P<plural>[a-z]+)(?:/(?P<name>[^/]+))?(?:/(?P<sub>status))?$"
)


@dataclass
class Fault:
    """An injected failure for requests whose path matches ``pattern``
    (a regular expression searched in the path, e.g. ``"/leases/"``).

    ``status`` answers with that code and a Status body (None: answer
    normally after ``delay``); ``times`` limits how often it fires (None:
    until removed).
    """

    pattern: str
    status: int | None = None
    delay: float = 0.0
    method: str | None = None
    times: int | None = None
    watch: bool | None = None  # only watches (True), only non-watches (False), or both
    fired: int = 0

    def applies(self, method: str, path: str, is_watch: bool) -> bool:
        if self.method and self.method != method:
            return False
        if self.watch is not None and self.watch != is_watch:
            return False
        if self.times is not None and self.fired >= self.times:
            return False
        return re.search(self.pattern, path) is not None


@dataclass(frozen=True)
class Request:
    """One request as the server saw it, for assertions on order."""

    at: float  # time.monotonic(): comparable across processes on one host
    method: str
    path: str
    query: dict[str, str]
    status: int
    body: Any = None


_REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    409: "Conflict",
    410: "Gone",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
}


@dataclass
class _Options:
    bookmark_interval: float = 1.0
    default_watch_timeout: float = 1800.0
    faults: list[Fault] = field(default_factory=list)


class KubeAPIServer:
    """A running HTTPS API server on 127.0.0.1 with its own CA and token.

    Use as a context manager (or ``start()``/``close()``).  ``write_service_account``
    writes the files a pod sees under /var/run/secrets/kubernetes.io/serviceaccount;
    ``incluster_env()`` gives KUBERNETES_SERVICE_HOST/PORT.  ``stop()`` then
    ``start()`` simulates the API server going away and coming back on the
    same port (connections are refused meanwhile).
    """

    def __init__(self, *, token: str = "test-token", port: int = 0, namespace: str = "default") -> None:
        self.token = token
        self.namespace = namespace
        self.store = Store()
        self.options = _Options()
        self.requests: list[Request] = []
        self._requests_lock = threading.Lock()
        self._ca = trustme.CA()
        self._cert = self._ca.issue_cert("127.0.0.1", "localhost", "kubernetes.default.svc")
        self._port = port
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._handlers: set[socket.socket] = set()
        self._handlers_lock = threading.Lock()
        self._stopping = threading.Event()

    # -- life cycle ----------------------------------------------------------

    @property
    def host(self) -> str:
        return "127.0.0.1"

    @property
    def port(self) -> int:
        return self._port

    @property
    def url(self) -> str:
        return f"https://{self.host}:{self.port}"

    @property
    def ca_pem(self) -> bytes:
        return self._ca.cert_pem.bytes()

    @property
    def running(self) -> bool:
        return self._httpd is not None

    def start(self) -> KubeAPIServer:
        if self._httpd is not None:
            return self
        self._stopping.clear()
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self._cert.configure_cert(context)
        server = _HTTPServer((self.host, self._port), _Handler)
        server.api = self
        server.socket = context.wrap_socket(server.socket, server_side=True)
        self._port = server.server_address[1]
        self._httpd = server
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop listening and cut every open connection (watches included)."""
        server, self._httpd = self._httpd, None
        if server is None:
            return
        self._stopping.set()
        server.shutdown()
        server.server_close()
        with self._handlers_lock:
            for sock in list(self._handlers):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
        self.store.close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def close(self) -> None:
        self.stop()

    def __enter__(self) -> KubeAPIServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def down(self) -> Iterator[None]:
        """The server is unreachable inside the block (connection refused)."""
        self.stop()
        try:
            yield
        finally:
            self.start()

    # -- configuration for clients --------------------------------------------

    def write_service_account(self, directory: Path, namespace: str | None = None) -> Path:
        """token, ca.crt and namespace, as mounted into a pod."""
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "token").write_text(self.token)
        (directory / "ca.crt").write_bytes(self.ca_pem)
        (directory / "namespace").write_text(namespace or self.namespace)
        return directory

    def incluster_env(self) -> dict[str, str]:
        return {"KUBERNETES_SERVICE_HOST": self.host, "KUBERNETES_SERVICE_PORT": str(self.port)}

    def write_kubeconfig(self, path: Path, namespace: str | None = None) -> Path:
        """A kubeconfig with this server, its CA and the bearer token."""
        ca_file = path.with_suffix(".ca.crt")
        ca_file.write_bytes(self.ca_pem)
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "kubeapi",
                    "cluster": {"server": self.url, "certificate-authority": str(ca_file)},
                }
            ],
            "users": [{"name": "test", "user": {"token": self.token}}],
            "contexts": [
                {
                    "name": "kubeapi",
                    "context": {
                        "cluster": "kubeapi",
                        "user": "test",
                        "namespace": namespace or self.namespace,
                    },
                }
            ],
            "current-context": "kubeapi",
        }
        path.write_text(json.dumps(config))
        return path

    # -- faults --------------------------------------------------------------

    def inject(self, fault: Fault) -> Fault:
        self.options.faults.append(fault)
        return fault

    def fail(
        self,
        pattern: str,
        status: int,
        *,
        method: str | None = None,
        times: int | None = None,
        watch: bool | None = None,
    ) -> Fault:
        """Answer matching requests with ``status`` (403, 500...)."""
        return self.inject(Fault(pattern, status=status, method=method, times=times, watch=watch))

    def slow(self, pattern: str, delay: float, *, method: str | None = None, times: int | None = None) -> Fault:
        """Delay matching requests by ``delay`` seconds before answering."""
        return self.inject(Fault(pattern, delay=delay, method=method, times=times))

    def clear_faults(self) -> None:
        self.options.faults.clear()

    def requests_matching(self, method: str, pattern: str) -> list[Request]:
        with self._requests_lock:
            return [r for r in self.requests if r.method == method and re.search(pattern, r.path)]

    # -- internal ------------------------------------------------------------

    def _record(self, request: Request) -> None:
        with self._requests_lock:
            self.requests.append(request)

    def _fault_for(self, method: str, path: str, is_watch: bool) -> Fault | None:
        for fault in list(self.options.faults):
            if fault.applies(method, path, is_watch):
                fault.fired += 1
                return fault
        return None


def _authorized(header: str | None, token: str) -> bool:
    # The scheme is case-insensitive (RFC 7235); the in-cluster loader of the
    # Python client sends "bearer".
    scheme, _, value = (header or "").partition(" ")
    return scheme.lower() == "bearer" and value.strip() == token


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    api: KubeAPIServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        # Clients hanging up mid-watch (Watch.stop(), cancelled threads) and
        # TLS handshakes cut short by stop() are normal here, not errors.
        pass


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _HTTPServer

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def setup(self) -> None:
        super().setup()
        with self.server.api._handlers_lock:
            self.server.api._handlers.add(self.connection)

    def finish(self) -> None:
        with self.server.api._handlers_lock:
            self.server.api._handlers.discard(self.connection)
        with contextlib.suppress(OSError):
            super().finish()

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    def do_PATCH(self) -> None:
        self._dispatch("PATCH")

    # -- plumbing ------------------------------------------------------------

    def _dispatch(self, method: str) -> None:
        api = self.server.api
        started = time.monotonic()
        parts = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        is_watch = query.get("watch") in ("true", "1")
        body = self._read_body()
        status = 500
        try:
            self._check(method, parts.path, is_watch)
            status = self._route(method, parts.path, query, body, is_watch)
        except ApiError as err:
            status = err.code
            self._send_json(err.code, status_body(err.code, err.reason, err.message, err.details))
        except SelectorError as err:
            status = 400
            self._send_json(400, status_body(400, "BadRequest", str(err)))
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError, OSError):
            status = 499  # the client went away
        finally:
            api._record(Request(started, method, parts.path, query, status, body))

    def _check(self, method: str, path: str, is_watch: bool) -> None:
        """Injected faults first (they stand for a proxy or the server
        itself failing), then authentication."""
        api = self.server.api
        fault = api._fault_for(method, path, is_watch)
        if fault is not None:
            if fault.delay:
                api._stopping.wait(fault.delay)  # stop() cuts a slow answer short
            if fault.status is not None:
                reason = _REASONS.get(fault.status, "InternalError")
                raise ApiError(fault.status, reason, f"injected fault: {reason}")
        if not _authorized(self.headers.get("Authorization"), api.token):
            raise ApiError(401, "Unauthorized", "Unauthorized")

    def _read_body(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        if not length:
            return None
        raw = self.rfile.read(length)
        try:
            return json.loads(raw)
        except ValueError:
            return raw.decode(errors="replace")

    def _send_json(self, code: int, body: Any) -> None:
        data = json.dumps(body, separators=(",", ":")).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Audit-Id", f"{time.monotonic_ns():x}")
        self.end_headers()
        self.wfile.write(data)

    def _resolve(self, path: str) -> tuple[Resource, str | None, str | None]:
        match = _CORE.match(path) or _GROUP.match(path)
        if match is None:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        groups = match.groupdict()
        api_version = f"{groups['group']}/{groups['version']}" if groups.get("group") else groups["version"]
        resource = RESOURCES.get((api_version, groups["plural"]))
        if resource is None:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        namespace, name = groups.get("ns"), groups.get("name")
        if resource.namespaced and namespace is None and (name is not None):
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if not resource.namespaced:
            namespace = ""
        return resource, namespace, name

    def _route(self, method: str, path: str, query: dict[str, str], body: Any, is_watch: bool) -> int:
        store = self.server.api.store
        resource, namespace, name = self._resolve(path)
        if name is None:
            if method == "GET":
                labels = parse_label_selector(query.get("labelSelector"))
                fields = parse_field_selector(query.get("fieldSelector"), resource.field_selectors)

                def matches(obj: Any) -> bool:
                    return labels(obj) and fields(obj)

                ns = namespace if resource.namespaced else None
                if is_watch:
                    return self._watch(resource, ns, matches, query)
                items, rv = store.list(resource, ns, matches)
                self._send_json(
                    200,
                    {
                        "kind": f"{resource.kind}List",
                        "apiVersion": resource.api_version,
                        "metadata": {"resourceVersion": str(rv)},
                        "items": items,
                    },
                )
                return 200
            if method == "POST":
                obj = self._object_body(body, resource)
                created = store.create(resource, namespace or "", obj)
                self._send_json(201, created)
                return 201
            raise ApiError(
                405,
                "MethodNotAllowed",
                "the server does not allow this method on the requested resource",
            )
        if method == "GET":
            self._send_json(200, store.get(resource, namespace or "", name))
            return 200
        if method == "PUT":
            obj = self._object_body(body, resource)
            self._send_json(200, store.replace(resource, namespace or "", name, obj))
            return 200
        if method == "DELETE":
            grace = query.get("gracePeriodSeconds")
            if grace is None and isinstance(body, dict) and body.get("gracePeriodSeconds") is not None:
                grace = str(body["gracePeriodSeconds"])
            self._send_json(
                200,
                store.delete(resource, namespace or "", name, int(grace) if grace is not None else None),
            )
            return 200
        raise ApiError(
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
        )

    @staticmethod
    def _object_body(body: Any, resource: Resource) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise ApiError(400, "BadRequest", "the body of the request was in an unknown format")
        kind = body.get("kind")
        if kind is not None and kind != resource.kind:
            raise ApiError(
                400,
                "BadRequest",
                f"the API version in the data does not match the expected {resource.kind}",
            )
        return body

    def _watch(self, resource: Resource, namespace: str | None, matches: Any, query: dict[str, str]) -> int:
        api = self.server.api
        store = api.store
        watcher = store.watch(resource, namespace, matches, query.get("resourceVersion"))
        timeout = float(query.get("timeoutSeconds") or api.options.default_watch_timeout)
        bookmarks = query.get("allowWatchBookmarks") in ("true", "1")
        ends_at = time.monotonic() + timeout
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            next_bookmark = time.monotonic() + api.options.bookmark_interval
            while api.running:
                now = time.monotonic()
                if now >= ends_at:
                    break
                wait = min(ends_at, next_bookmark if bookmarks else ends_at) - now
                try:
                    event = watcher.events.get(timeout=max(0.0, min(wait, 0.2)))
                except queue.Empty:
                    event = None
                    if bookmarks and time.monotonic() >= next_bookmark:
                        rv = store.bookmark_version(watcher)
                        if rv is not None:
                            self._chunk(
                                {
                                    "type": "BOOKMARK",
                                    "object": {
                                        "kind": resource.kind,
                                        "apiVersion": resource.api_version,
                                        "metadata": {"resourceVersion": str(rv)},
                                    },
                                }
                            )
                        next_bookmark = time.monotonic() + api.options.bookmark_interval
                    continue
                if event is None:
                    break  # the store closed this watch
                self._chunk(event)
            self._end_chunks()
        finally:
            store.stop_watch(watcher)
        return 200

    def _chunk(self, event: Any) -> None:
        data = json.dumps(event, separators=(",", ":")).encode() + b"\n"
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _end_chunks(self) -> None:
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()
