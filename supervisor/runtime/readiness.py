"""Readiness checks: when a started process is ready for its dependents.

``ReadyProbe.wait`` probes until the check passes and only ever returns then;
the caller owns the time limit (``trio.move_on_after(check.timeout)``) and
cancels the wait when the process exits first.  Every probe is bounded on its own, so
one hung connection or command cannot eat the whole start-up timeout.

The exec probe is spawned and waited for by trio (pidfd, by PID): nothing here
reaps any other child.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shlex
import signal
import socket
import subprocess
from collections.abc import Mapping

import trio

from supervisor._redact import redact_url
from supervisor._units import format_duration, signal_name
from supervisor.config._model import ReadyCheck
from supervisor.config._ready import parse_tcp_address

__all__ = ["ReadyProbe", "describe"]

log = logging.getLogger("supervisor.readiness")

# Per-probe limits, in seconds.  A connect to a listening socket on this
# host takes microseconds; a health endpoint or a check command gets longer,
# as with kubelet's probes (whose default timeout, 1 s, is too tight for a
# command that starts an interpreter).
CONNECT_TIMEOUT = 1.0
HTTP_TIMEOUT = 2.0
EXEC_TIMEOUT = 10.0

_HTTP_HEADERS = (("User-Agent", "pid1-supervisor readiness probe"), ("Accept", "*/*"))


def describe(check: ReadyCheck) -> str:
    """One phrase for logs and plans: ``tcp 127.0.0.1:8080 accepts connections``."""
    kind = check.kind
    if kind == "socket":
        return f"socket {_text(check)} accepts connections"
    if kind == "tcp":
        return f"tcp {_text(check)} accepts connections"
    if kind == "http":
        return f"http GET {redact_url(_text(check))} answers 2xx/3xx"
    if kind == "exec":
        return f"exec `{shlex.join(_argv(check))}` exits 0"
    if kind == "file":
        return f"file {_text(check)} exists"
    return f"after {format_duration(_seconds(check))}"


class ReadyProbe:
    """A readiness check bound to a process's environment and directory.

    ``env`` and ``cwd`` are the process's: the exec probe runs with them,
    and relative socket/file paths are taken from ``cwd``.  After a wait that
    timed out, ``last_failure`` tells why the last probe failed
    ("connection refused", "HTTP 503", "exited with 1") for the message.
    """

    def __init__(
        self,
        check: ReadyCheck,
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        probe_timeout: float | None = None,
    ) -> None:
        self.check = check
        # One limit for every kind of probe (a health check's timeout:),
        # instead of the per-kind defaults above.
        self.probe_timeout = probe_timeout
        self.env = dict(env) if env is not None else None
        self.cwd = cwd
        self.attempts = 0
        self.last_failure: str | None = None

    async def wait(self) -> None:
        """Return once the check passes, probing again ``check.interval``
        seconds after each failed probe; never return otherwise."""
        check = self.check
        if check.kind == "after":
            await trio.sleep(_seconds(check))
            return
        while True:
            failure = await self.probe()
            if failure is None:
                return
            if failure != self.last_failure:
                log.debug("%s: not yet (%s)", describe(check), failure)
            self.last_failure = failure
            await trio.sleep(check.interval)

    async def probe(self) -> str | None:
        """Probe once: None when the check passes, else why it did not."""
        self.attempts += 1
        kind = self.check.kind
        if kind == "socket":
            return await self._probe_socket()
        if kind == "tcp":
            return await self._probe_tcp()
        if kind == "http":
            return await self._probe_http()
        if kind == "exec":
            return await self._probe_exec()
        if kind == "file":
            # A plain stat, not a thread: the marker files this is meant for
            # live on local disks, and a thread per probe would let trio's
            # MockClock jump past the probe in tests.
            return None if os.path.exists(self._resolve(_text(self.check))) else "does not exist"
        return None  # "after" has nothing to probe

    def _limit(self, default: float) -> float:
        return self.probe_timeout if self.probe_timeout is not None else default

    def _resolve(self, path: str) -> str:
        return os.path.join(self.cwd, path) if self.cwd else path

    async def _probe_socket(self) -> str | None:
        path = _text(self.check)
        # "@name" is a socket in the abstract namespace, as ss(8) shows it.
        address = "\0" + path[1:] if path.startswith("@") else self._resolve(path)
        limit = self._limit(CONNECT_TIMEOUT)
        with trio.move_on_after(limit):
            try:
                stream = await trio.open_unix_socket(address)
            except OSError as exc:
                return _reason(exc)
            await stream.aclose()
            return None
        return f"no connection within {format_duration(limit)}"

    async def _probe_tcp(self) -> str | None:
        # The configuration layer validated the address with the same parser.
        host, port = parse_tcp_address(_text(self.check))
        limit = self._limit(CONNECT_TIMEOUT)
        with trio.move_on_after(limit):
            try:
                stream = await trio.open_tcp_stream(host, port)
            except OSError as exc:
                return _reason(exc)
            await stream.aclose()
            return None
        return f"no connection within {format_duration(limit)}"

    async def _probe_http(self) -> str | None:
        # Imported here, as HttpRequest does: the email package it pulls in
        # is ~2 MiB that a supervisor without HTTP probes should not carry.
        import http.client

        from supervisor._http import HttpRequest

        limit = self._limit(HTTP_TIMEOUT)
        # Like kubelet's HTTPS probes, no certificate check: the process's
        # own endpoint usually has a self-signed or cluster-internal
        # certificate, and a probe sends nothing secret; it only asks whether
        # the server answers.
        request = HttpRequest(url=_text(self.check), headers=_HTTP_HEADERS, timeout=limit, tls_verify=False)
        with trio.move_on_after(limit):
            try:
                status = (await request.send()).status
            except (OSError, http.client.HTTPException, ValueError) as exc:
                return _reason(exc)
            return None if 200 <= status < 400 else f"HTTP {status}"
        return f"no answer within {format_duration(limit)}"

    async def _probe_exec(self) -> str | None:
        argv = _argv(self.check)
        limit = self._limit(EXEC_TIMEOUT)
        with trio.move_on_after(limit):
            try:
                result = await trio.run_process(
                    list(argv),
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    check=False,
                    env=self.env,
                    cwd=self.cwd,
                    # Its own group, so that a timeout also kills whatever
                    # the check command started (a shell's children).
                    process_group=0,
                    deliver_cancel=_kill_group,
                )
            except OSError as exc:
                return self._cannot_spawn(argv, exc)
            code = result.returncode
            if code == 0:
                return None
            if code < 0:
                return f"killed by {signal_name(-code)}"
            return f"exited with {code}"
        return f"did not finish within {format_duration(limit)} (killed)"

    def _cannot_spawn(self, argv: tuple[str, ...], exc: OSError) -> str:
        if isinstance(exc, FileNotFoundError):
            missing = exc.filename if exc.filename is not None else argv[0]
            if missing == self.cwd:
                reason = f"working directory {missing} does not exist"
            else:
                reason = f"{missing}: command not found"
        else:
            reason = f"{argv[0]}: {_reason(exc)}"
        # Almost always a mistake in the configuration, and the wait would
        # otherwise only end in "not ready within ...": say it at once.
        if reason != self.last_failure:
            log.warning("ready check %s cannot run: %s", describe(self.check), reason)
        return reason


async def _kill_group(process: trio.Process) -> None:
    # Runs before trio waits for the process, so the group id (the
    # still-unreaped leader's PID) cannot have been reused yet.
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)


def _reason(exc: BaseException) -> str:
    """ "connection refused" rather than "[Errno 111] Connection refused"."""
    if isinstance(exc, TimeoutError) and not exc.strerror:
        return "timed out"
    # trio.open_tcp_stream wraps the errors of each address it tried.
    if isinstance(exc.__cause__, BaseExceptionGroup):
        exc = exc.__cause__.exceptions[0]
    if isinstance(exc, OSError) and (exc.errno or exc.strerror):
        # The errno's own text: trio puts the address in front of strerror.
        # (getaddrinfo's errors have their own numbers: keep their text.)
        text = os.strerror(exc.errno) if exc.errno and not isinstance(exc, socket.gaierror) else str(exc.strerror)
        return text[:1].lower() + text[1:]
    return str(exc) or type(exc).__name__


def _text(check: ReadyCheck) -> str:
    if not isinstance(check.target, str):
        raise TypeError(f"a {check.kind} ready check needs a string target, got {check.target!r}")
    return check.target


def _argv(check: ReadyCheck) -> tuple[str, ...]:
    if not isinstance(check.target, tuple) or not check.target:
        raise TypeError(f"an exec ready check needs an argv tuple, got {check.target!r}")
    return check.target


def _seconds(check: ReadyCheck) -> float:
    if isinstance(check.target, bool) or not isinstance(check.target, int | float):
        raise TypeError(f"an after ready check needs seconds, got {check.target!r}")
    return float(check.target)
