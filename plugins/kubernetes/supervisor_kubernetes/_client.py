"""A small, blocking HTTPS client for the API server, over urllib3.

The ``kubernetes`` package loads every model class on import (about 30 MiB
and 200 ms), which a pod pays in every replica for the handful of calls this
plugin makes.  In a pod the connection needs nothing from it: the server is
``KUBERNETES_SERVICE_HOST``/``PORT``, trust is the ServiceAccount's
``ca.crt`` and identity its projected ``token``, which the kubelet rotates
(the file is read again whenever it changes, and after a 401).  The package
is imported only to read a kubeconfig (auth plugins, exec credentials), for
runs outside a cluster (``kubeconfig_credentials``).

TLS is always verified.  Objects stay plain JSON dicts.  Every method blocks:
``KubeAPI`` runs them in worker threads under the deadline.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import socket
import ssl
import threading
import urllib.parse
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import urllib3
from urllib3.exceptions import HTTPError, ProtocolError

from ._errors import APIError

__all__ = [
    "APIError",
    "Client",
    "Credentials",
    "Watch",
    "in_cluster_credentials",
    "kubeconfig_credentials",
]

Obj = dict[str, Any]

# Connections kept per pool: a watch has a pool of its own; the short calls
# (a lease, an event, a read) share this one.
_POOL_SIZE = 4


@dataclass
class Credentials:
    """Where the server is and how to trust it and be trusted by it.

    ``token_file``: a bearer token read again whenever the file changes
    (the kubelet swaps a projected token's directory atomically);
    ``token``: a fixed one, or what ``refresh`` returns before each request
    (a kubeconfig's exec credential plugin)."""

    server: str
    ca_file: str | None = None
    ca_data: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    token_file: str | None = None
    token: str | None = None
    refresh: Callable[[], str | None] | None = None
    _stamp: tuple[int, int, int] | None = field(default=None, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def authorization(self, *, reread: bool = False) -> str | None:
        """The Authorization header's value, if any."""
        if self.refresh is not None:
            self.token = self.refresh()
        elif self.token_file is not None:
            with self._lock:
                self._read_token(reread)
        return f"Bearer {self.token}" if self.token else None

    def _read_token(self, reread: bool) -> None:
        assert self.token_file is not None
        try:
            info = os.stat(self.token_file)
            stamp = (info.st_ino, info.st_mtime_ns, info.st_size)
            if reread or stamp != self._stamp:
                self.token = Path(self.token_file).read_text().strip()
                self._stamp = stamp
        except OSError as exc:
            raise APIError(f"cannot read the ServiceAccount token: {exc}") from exc

    def ssl_context(self) -> ssl.SSLContext:
        """Verifying context: the CA given (else the system's), the client
        certificate if any."""
        try:
            context = ssl.create_default_context(cafile=self.ca_file, cadata=self.ca_data)
            if self.cert_file:
                context.load_cert_chain(self.cert_file, self.key_file)
        except (OSError, ssl.SSLError) as exc:
            raise APIError(f"cannot load the TLS certificates: {exc}") from exc
        return context


def in_cluster_credentials(service_account_dir: str, environ: Mapping[str, str] | None = None) -> Credentials:
    """A pod's own: the service host and port from the environment, the
    ServiceAccount's CA and token files."""
    env = os.environ if environ is None else environ
    host, port = env.get("KUBERNETES_SERVICE_HOST", ""), env.get("KUBERNETES_SERVICE_PORT", "443")
    if not host:
        raise APIError("not in a cluster: KUBERNETES_SERVICE_HOST is not set")
    if ":" in host:
        host = f"[{host}]"
    directory = Path(service_account_dir)
    credentials = Credentials(
        f"https://{host}:{port}", ca_file=str(directory / "ca.crt"), token_file=str(directory / "token")
    )
    credentials.authorization()  # a missing token fails now, with its path
    if not Path(str(credentials.ca_file)).is_file():
        raise APIError(f"cannot read the ServiceAccount CA: no file {credentials.ca_file}")
    return credentials


def kubeconfig_credentials(path: str | None) -> tuple[Credentials, str | None]:
    """From a kubeconfig (None: $KUBECONFIG or ~/.kube/config), with the
    ``kubernetes`` package, which knows its auth plugins and exec
    credentials; and the context's namespace.  Imports that package: only
    for runs outside a cluster."""
    from kubernetes import client, config
    from kubernetes.config.config_exception import ConfigException

    if path is None and not Path(config.KUBE_CONFIG_DEFAULT_LOCATION).expanduser().exists():
        raise APIError("no in-cluster configuration (KUBERNETES_SERVICE_HOST is not set) and no kubeconfig")
    configuration = client.Configuration()
    try:
        config.load_kube_config(config_file=path, client_configuration=configuration)  # type: ignore[no-untyped-call]
        _, active = config.list_kube_config_contexts(config_file=path)  # type: ignore[no-untyped-call]
    except (ConfigException, OSError, ValueError) as exc:
        raise APIError(f"cannot read the kubeconfig: {exc}") from exc
    if not configuration.verify_ssl:
        raise APIError("the kubeconfig turns TLS verification off (insecure-skip-tls-verify): not supported")

    def refresh() -> str | None:
        # Runs the exec credential plugin again when its token has expired.
        value = configuration.get_api_key_with_prefix("authorization")
        return str(value).removeprefix("Bearer ").strip() if value else None

    credentials = Credentials(
        configuration.host,
        ca_file=configuration.ssl_ca_cert,
        cert_file=configuration.cert_file,
        key_file=configuration.key_file,
        refresh=refresh,
    )
    namespace = (active or {}).get("context", {}).get("namespace")
    return credentials, namespace


def _encode(value: object) -> str:
    """MicroTime as the API server parses it: RFC 3339, UTC, six digits."""
    if isinstance(value, datetime.datetime):
        return value.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    raise TypeError(f"cannot send {type(value).__name__} to the API server")


class Client:
    """GET, LIST (every page), WATCH, PUT and POST on one server."""

    def __init__(self, credentials: Credentials) -> None:
        self.credentials = credentials
        self._context = credentials.ssl_context()
        self._pool = self.pool()
        # What the server sent: objects (list items, watch events, single
        # objects) and bytes of their JSON, for the log and the benchmarks.
        self._reads = [0, 0]
        self._reads_lock = threading.Lock()

    def reads(self) -> tuple[int, int]:
        """Objects and bytes read from the server so far."""
        with self._reads_lock:
            return self._reads[0], self._reads[1]

    def count(self, objects: int, size: int) -> None:
        with self._reads_lock:
            self._reads[0] += objects
            self._reads[1] += size

    def pool(self) -> urllib3.PoolManager:
        """A connection pool to the server.  A refused connect is tried once
        more; nothing else is (reads are retried by the caller when their
        connection was dropped unanswered, writes never)."""
        retries = urllib3.Retry(total=1, connect=1, read=0, status=0, redirect=0, other=0)
        return urllib3.PoolManager(num_pools=1, maxsize=_POOL_SIZE, ssl_context=self._context, retries=retries)

    def url(self, path: str, query: Mapping[str, object] | None = None) -> str:
        params = {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in (query or {}).items() if v}
        return self.credentials.server.rstrip("/") + path + (f"?{urllib.parse.urlencode(params)}" if params else "")

    def request(
        self,
        method: str,
        path: str,
        timeout: float,
        *,
        query: Mapping[str, object] | None = None,
        body: Obj | None = None,
    ) -> Obj:
        """One call, its JSON answer; ``APIError`` for anything else."""
        data = None if body is None else json.dumps(body, default=_encode).encode()
        response = self._send(self._pool, method, self.url(path, query), urllib3.Timeout(total=timeout), data)
        try:
            payload = response.data
        except HTTPError as exc:
            raise _network_error(exc) from exc
        finally:
            response.release_conn()
        try:
            result = json.loads(payload)
        except ValueError as exc:
            raise APIError(f"the API server answered with something other than JSON: {exc}") from exc
        if not isinstance(result, dict):
            raise APIError("the API server answered with something other than a JSON object")
        items = result.get("items")
        self.count(len(items) if isinstance(items, list) else 1, len(payload))
        return result

    def list_all(self, path: str, timeout: float, query: Mapping[str, object], limit: int) -> tuple[list[Obj], str]:
        """Every item, page by page (``limit`` each), and the list's resourceVersion."""
        items: list[Obj] = []
        token = ""
        while True:
            page = self.request("GET", path, timeout, query={**query, "limit": limit, "continue": token})
            items.extend(page.get("items") or [])
            meta = page.get("metadata") or {}
            token = str(meta.get("continue") or "")
            if not token:
                return items, str(meta.get("resourceVersion") or "")

    def watch(self, path: str, query: Mapping[str, object], connect_timeout: float, read_timeout: float) -> Watch:
        """A watch request on a pool of its own: stopping it shuts its socket,
        which must never go back to a pool that later requests use."""
        pool = self.pool()
        timeout = urllib3.Timeout(connect=connect_timeout, read=read_timeout)
        response = self._send(pool, "GET", self.url(path, {**query, "watch": True}), timeout, None, stream=True)
        return Watch(response, pool, self.count)

    def _send(
        self,
        pool: urllib3.PoolManager,
        method: str,
        url: str,
        timeout: urllib3.Timeout,
        data: bytes | None,
        *,
        stream: bool = False,
    ) -> urllib3.BaseHTTPResponse:
        """Send, with the token read again and one more try after a 401 (a
        token rotated between our read and the server's check)."""
        for reread in (False, True):
            headers = {"Accept": "application/json", "User-Agent": "pid1-supervisor-kubernetes"}
            if data is not None:
                headers["Content-Type"] = "application/json"
            authorization = self.credentials.authorization(reread=reread)
            if authorization:
                headers["Authorization"] = authorization
            try:
                response = pool.request(
                    method, url, body=data, headers=headers, timeout=timeout, preload_content=False, redirect=False
                )
            except HTTPError as exc:
                raise _network_error(exc) from exc
            if 200 <= response.status < 300:
                return response
            error = _status_error(response)
            if response.status != 401 or reread or self.credentials.token_file is None:
                raise error
        raise AssertionError("unreachable")


class Watch:
    """The events of one watch request, as dicts, until the server ends it;
    an ERROR event (410 Gone for an expired version) is raised as an
    ``APIError``.  ``stop()`` from another thread ends it at once."""

    def __init__(
        self, response: urllib3.BaseHTTPResponse, pool: urllib3.PoolManager, count: Callable[[int, int], None]
    ) -> None:
        self._response = response
        self._pool = pool
        self._count = count
        self._stopped = False

    def __iter__(self) -> Iterator[Obj]:
        try:
            for line in self._response:
                if self._stopped:
                    return
                if not line.strip():
                    continue
                self._count(1, len(line))
                event = json.loads(line)
                if event.get("type") == "ERROR":
                    status = event.get("object") or {}
                    code = status.get("code") if isinstance(status.get("code"), int) else None
                    message = status.get("message") or status.get("reason") or "watch error"
                    raise APIError(f"HTTP {code}: {message}" if code else str(message), code)
                yield event
        except (HTTPError, OSError, ValueError) as exc:
            if not self._stopped:
                raise _network_error(exc) from exc
        finally:
            self.close()

    def stop(self) -> None:
        """Shut only the reading side of the socket: it wakes the blocked
        read, and TLS writes no closing alert into a socket that cannot be
        written (EPIPE, a SIGPIPE the supervisor would take for its own)."""
        self._stopped = True
        connection = getattr(self._response, "connection", None)
        sock = getattr(connection, "sock", None)
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RD)

    def close(self) -> None:
        self._pool.clear()


def _status_error(response: urllib3.BaseHTTPResponse) -> APIError:
    try:
        body = response.data
    except HTTPError:
        body = b""
    finally:
        response.release_conn()
    message = _status_message(body) or (response.reason or "").strip()
    return APIError(f"HTTP {response.status}: {message}", response.status)


def _status_message(body: bytes) -> str:
    if not body:
        return ""
    try:
        status = json.loads(body)
    except ValueError:
        return body.decode(errors="replace").strip()[:200]
    if isinstance(status, Mapping):
        return str(status.get("message") or status.get("reason") or "")
    return ""


def _network_error(exc: BaseException) -> APIError:
    """One readable line for what the network raised."""
    # urllib3 wraps the cause: "Max retries exceeded ... (Caused by NewConnectionError(...))".
    reason = getattr(exc, "reason", None)
    detail = str(reason) if reason else str(exc)
    # ProtocolError: the connection was closed or reset with no answer (a
    # read timeout is a ReadTimeoutError, and a refused connect is not one).
    dropped = isinstance(exc, ProtocolError) or isinstance(reason, ProtocolError)
    return APIError(f"API server unreachable: {type(exc).__name__}: {detail}", dropped=dropped)
