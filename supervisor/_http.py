"""One HTTP request from trio: the readiness probe's GET, the http plugin's calls.

The standard library's ``http.client`` runs in a worker thread with socket
timeouts of its own: a cancellation (the probe's limit, the deadline, a
second SIGTERM) returns at once, and the abandoned thread ends within
``timeout`` by itself.  One request per connection, redirects not followed
(a 3xx is a status like any other), no retries: the callers decide what a
status means and when to try again.  No dependency beyond the standard
library for a handful of requests per pod lifetime.
"""

from __future__ import annotations

import base64
import ssl
from dataclasses import dataclass
from functools import cache, partial
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit

import trio

from ._redact import redact_url

if TYPE_CHECKING:
    import http.client

__all__ = ["HttpRequest", "HttpResponse"]

# The blocking calls get a limiter of their own: a stuck endpoint holds its
# threads until their socket timeout, and must not starve trio's default
# limiter, which every process spawn also needs.  Eight is more than the
# probes and phase requests of a pod make at once.  One per trio run, as a
# limiter belongs to a run.
_THREADS = 8
_LIMITER: trio.lowlevel.RunVar[trio.CapacityLimiter] = trio.lowlevel.RunVar("supervisor_http")


@dataclass(frozen=True, slots=True)
class HttpResponse:
    """A response: its status and the first bytes of its body (as many as asked for)."""

    status: int
    body: bytes = b""


@dataclass(frozen=True, slots=True, kw_only=True)
class HttpRequest:
    """One request to an ``http://`` or ``https://`` URL.

    Credentials in the URL (``http://user:password@host/``, percent-encoded)
    become basic authentication, as in curl, unless ``headers`` has an
    ``Authorization`` of its own.  ``timeout`` bounds the connection and each
    read.  ``tls_verify`` False accepts any certificate (the way kubelet's
    HTTPS probes do); ``ca_file`` is a PEM bundle to verify against instead
    of the system's.
    """

    url: str
    method: str = "GET"
    headers: tuple[tuple[str, str], ...] = ()
    body: bytes | None = None
    timeout: float = 5.0
    tls_verify: bool = True
    ca_file: str | None = None

    def __str__(self) -> str:
        """For logs and timelines: ``POST http://user:***@host/path``."""
        return f"{self.method} {redact_url(self.url)}"

    async def send(self, *, read: int = 0) -> HttpResponse:
        """Make the request; return the status and up to ``read`` bytes of the body.

        Raises ``OSError`` when there is no answer (refused, timed out, a
        TLS failure, an unreadable ``ca_file``), ``http.client.HTTPException``
        for an answer that is not HTTP, and ``ValueError`` for a URL that is
        not http(s).
        """
        return await trio.to_thread.run_sync(
            partial(_blocking_send, self, read), abandon_on_cancel=True, limiter=_limiter()
        )


def _basic_auth(url: str) -> str | None:
    """The ``Authorization`` value for the credentials in ``url``, or None."""
    parts = urlsplit(url)
    if parts.username is None:
        return None
    credentials = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
    return "Basic " + base64.b64encode(credentials.encode()).decode()


def _limiter() -> trio.CapacityLimiter:
    try:
        return _LIMITER.get()
    except LookupError:
        limiter = trio.CapacityLimiter(_THREADS)
        _LIMITER.set(limiter)
        return limiter


def _blocking_send(request: HttpRequest, read: int) -> HttpResponse:
    # http.client pulls in the email package: ~2 MiB that a supervisor
    # without HTTP checks or requests should not carry for the life of the pod.
    import http.client

    parts = urlsplit(request.url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"not an http(s) URL: {redact_url(request.url)}")
    connection: http.client.HTTPConnection
    if parts.scheme == "https":
        context = _tls_context(request.tls_verify, request.ca_file)
        connection = http.client.HTTPSConnection(parts.hostname, parts.port, timeout=request.timeout, context=context)
    else:
        connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=request.timeout)
    headers = {"Connection": "close", **dict(request.headers)}
    authorization = _basic_auth(request.url)
    if authorization is not None and not any(k.lower() == "authorization" for k in headers):
        headers["Authorization"] = authorization
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    try:
        connection.request(request.method, target, body=request.body, headers=headers)
        response = connection.getresponse()
        return HttpResponse(response.status, response.read(read) if read else b"")
    finally:
        connection.close()


def _tls_context(verify: bool, ca_file: str | None) -> ssl.SSLContext:
    if not verify:
        return _unverified()
    if ca_file is None:
        return _system()
    # Read again for every request: the file may be a Secret's volume that is
    # still being mounted, or rotated since.
    try:
        return ssl.create_default_context(cafile=ca_file)
    except OSError as exc:
        # Reported like any other failed request.  ssl's own error does not
        # name the file.
        raise OSError(exc.errno, f"cannot read ca_file: {exc.strerror}", ca_file) from exc


@cache
def _system() -> ssl.SSLContext:
    return ssl.create_default_context()


@cache
def _unverified() -> ssl.SSLContext:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context
