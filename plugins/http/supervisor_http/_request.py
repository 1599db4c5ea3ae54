"""Making one request, retried until its status is the expected one.

Each attempt runs the standard library's ``http.client`` in a worker thread
with socket timeouts of its own, so a cancellation (the deadline, a second
SIGTERM) returns at once and the abandoned thread ends within
``attempt_timeout`` by itself.  No new dependency for one request per phase.
"""

from __future__ import annotations

import http.client
import logging
import math
import ssl
from dataclasses import dataclass
from functools import partial
from urllib.parse import urlsplit

import trio

from supervisor import Context, Deadline

from ._spec import Request

__all__ = ["Result", "perform"]

# Enough of a response body to explain a failure in the log.
_SNIPPET_BYTES = 512
_SNIPPET_CHARS = 200


@dataclass(frozen=True, slots=True)
class Result:
    """How a request ended: ``outcome`` is a timeline word (ok, timeout)."""

    outcome: str
    detail: str
    attempts: int
    status: int | None = None


async def perform(request: Request, ctx: Context, deadline: Deadline | None) -> Result:
    """Make ``request`` until it succeeds or its timeout ends; record it in the timeline."""
    with ctx.timeline.step(request.phase, request.name, plugin=ctx.plugin) as step:
        result = await _retry(request, ctx, deadline)
        step.outcome = result.outcome
        step.detail = result.detail
    return result


async def _retry(request: Request, ctx: Context, deadline: Deadline | None) -> Result:
    log = ctx.log
    started = trio.current_time()
    attempts = 0
    last = "not attempted"
    try:
        with trio.move_on_after(math.inf if request.timeout is None else request.timeout):
            while True:
                attempts += 1
                status, last = await _attempt(request)
                elapsed = trio.current_time() - started
                if status is not None and status in request.expect:
                    log.info("%s: %s after %d attempt(s) in %s", request.name, last, attempts, _duration(elapsed))
                    return Result("ok", f"status {status}", attempts, status)
                # The first failure says why we wait; the rest would only
                # repeat it every retry_interval.
                log.log(
                    logging.INFO if attempts == 1 else logging.DEBUG,
                    "%s: %s (expected %s); retrying every %s",
                    request.name,
                    last,
                    request.expect,
                    _duration(request.retry_interval),
                )
                await trio.sleep(request.retry_interval)
    except trio.Cancelled:
        log.warning(
            "%s: cancelled by %s after %d attempt(s); last: %s",
            request.name,
            why_cancelled(ctx, deadline),
            attempts,
            last,
        )
        raise
    elapsed = trio.current_time() - started
    log.warning("%s: gave up after %d attempt(s) in %s; last: %s", request.name, attempts, _duration(elapsed), last)
    return Result("timeout", f"{attempts} attempt(s), last: {last}", attempts)


def why_cancelled(ctx: Context, deadline: Deadline | None) -> str:
    """For the log: what most likely cut a step short."""
    if ctx.main_exited.is_set():
        return "the main process's exit"
    if deadline is not None and deadline.remaining_for_hooks() <= 0:
        return "the shutdown deadline"
    return "the plugin's hook_timeout or the shutdown"


async def _attempt(request: Request) -> tuple[int | None, str]:
    """One try: the status (None if there was no response) and a description."""
    try:
        with trio.fail_after(request.attempt_timeout):
            status, snippet = await trio.to_thread.run_sync(partial(_blocking_request, request), abandon_on_cancel=True)
    except trio.TooSlowError:
        return None, f"no response within {_duration(request.attempt_timeout)}"
    except (OSError, http.client.HTTPException) as exc:
        return None, _describe(exc)
    return status, f"status {status}" + (f": {snippet}" if snippet else "")


def _blocking_request(request: Request) -> tuple[int, str]:
    parts = urlsplit(request.url)
    host = parts.hostname or ""
    connection: http.client.HTTPConnection
    if parts.scheme == "https":
        context = _tls_context(request.tls_verify, request.ca_file)
        connection = http.client.HTTPSConnection(host, parts.port, timeout=request.attempt_timeout, context=context)
    else:
        connection = http.client.HTTPConnection(host, parts.port, timeout=request.attempt_timeout)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    try:
        connection.request(request.method, target, body=request.body, headers=dict(request.headers))
        response = connection.getresponse()
        text = response.read(_SNIPPET_BYTES).decode(errors="replace")
        return response.status, " ".join(text.split())[:_SNIPPET_CHARS]
    finally:
        connection.close()


def _tls_context(verify: bool, ca_file: str | None) -> ssl.SSLContext:
    if not verify:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        return context
    try:
        return ssl.create_default_context(cafile=ca_file)
    except OSError as exc:
        # Reported like any other failed attempt: a Secret's volume may still
        # be mounting.  ssl's own error does not name the file.
        raise OSError(exc.errno, f"cannot read ca_file: {exc.strerror}", ca_file) from exc


def _describe(exc: BaseException) -> str:
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, TimeoutError):
        return "timed out"
    if isinstance(exc, ssl.SSLCertVerificationError):
        return f"certificate verify failed: {exc.verify_message}"
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.strerror}: {exc.filename}" if exc.filename else exc.strerror
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _duration(seconds: float) -> str:
    """500ms, 1.5s: the way the settings are written."""
    return f"{seconds * 1000:.0f}ms" if seconds < 1 else f"{seconds:.1f}s"
