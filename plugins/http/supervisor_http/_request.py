"""Making one request, retried until its status is the expected one.

Each attempt is a ``supervisor.HttpRequest``: the standard library's
``http.client`` in a worker thread with socket timeouts of its own, so a
cancellation (the deadline, a second SIGTERM) returns at once and the
abandoned thread ends within ``attempt_timeout`` by itself.
"""

from __future__ import annotations

import http.client
import logging
import math
import ssl
from dataclasses import dataclass

import trio

from supervisor import Context, Deadline, format_duration, why_cancelled

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
                    log.info("%s: %s after %d attempt(s) in %s", request.name, last, attempts, format_duration(elapsed))
                    return Result("ok", f"status {status}", attempts, status)
                # The first failure says why we wait; the rest would only
                # repeat it every retry_interval.
                log.log(
                    logging.INFO if attempts == 1 else logging.DEBUG,
                    "%s: %s (expected %s); retrying every %s",
                    request.name,
                    last,
                    request.expect,
                    format_duration(request.retry_interval),
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
    log.warning(
        "%s: gave up after %d attempt(s) in %s; last: %s", request.name, attempts, format_duration(elapsed), last
    )
    return Result("timeout", f"{attempts} attempt(s), last: {last}", attempts)


async def _attempt(request: Request) -> tuple[int | None, str]:
    """One try: the status (None if there was no response) and a description."""
    limit = request.http.timeout
    try:
        with trio.fail_after(limit):
            response = await request.http.send(read=_SNIPPET_BYTES)
    except trio.TooSlowError:
        return None, f"no response within {format_duration(limit)}"
    except (OSError, http.client.HTTPException) as exc:
        return None, _describe(exc)
    snippet = " ".join(response.body.decode(errors="replace").split())[:_SNIPPET_CHARS]
    return response.status, f"status {response.status}" + (f": {snippet}" if snippet else "")


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
