"""The http plugin against a real HTTP server on 127.0.0.1 (ephemeral port):
methods, bodies and headers as sent, retries until the expected status,
timeouts, refused connections, the deadline."""

from __future__ import annotations

import base64
import importlib.metadata
import json
import logging
import re
import socket
import ssl
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import supervisor_http
import trio
import trustme

from supervisor import Deadline
from tests.plugins._helpers import (
    FakeProcess,
    LogRecords,
    QuietHandler,
    call_every_phase,
    configure,
    configure_problems,
    make_context,
    serve_http,
)


@dataclass
class Received:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Server:
    """Answers with ``statuses`` in turn (the last one repeats).  With
    ``hang`` it answers nothing until the test ends; with ``together`` a
    request waits for that many to be in the server at once, and gets 500
    if they never are."""

    port: int = 0
    statuses: list[int] = field(default_factory=lambda: [200])
    hang: bool = False
    together: int = 1
    received: list[Received] = field(default_factory=list)
    released: threading.Event = field(default_factory=threading.Event)
    barrier: threading.Barrier | None = None

    def meet(self) -> bool:
        """Wait for ``together`` requests to be here at once: whether they were."""
        if self.together <= 1:
            return True
        if self.barrier is None:
            self.barrier = threading.Barrier(self.together, timeout=10)
        try:
            self.barrier.wait()
        except threading.BrokenBarrierError:
            return False
        return True

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@pytest.fixture
def server() -> Iterator[Server]:
    state = Server()

    class Handler(QuietHandler):
        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length)
            state.received.append(Received(self.command, self.path, dict(self.headers), body))
            status = state.statuses.pop(0) if len(state.statuses) > 1 else state.statuses[0]
            if state.hang:
                state.released.wait(60)
            if not state.meet():
                status = 500
            reply = f"answer {len(state.received)}".encode()
            try:
                self.send_response(status)
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(reply)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up waiting: that is what the test is about

        do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = _answer

    with serve_http(Handler) as state.port:
        try:
            yield state
        finally:
            state.released.set()
            if state.barrier is not None:
                state.barrier.abort()


_WEB = ", process: web"


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _run(
    tmp_path: Path,
    requests: str,
    phase: str = "pre_stop",
    deadline: Deadline | None = None,
    process: FakeProcess | None = None,
) -> tuple[list[supervisor_http.Result], LogRecords, object]:
    text = (
        "grace_period: 30s\nprocesses:\n  - {name: web, command: 'true', main: true}\n"
        "plugins:\n  http:\n    requests:\n" + requests
    )
    settings, config = configure(supervisor_http.plugin, tmp_path, text, "http")
    ctx = make_context("http", settings, config)
    with LogRecords.capture("http") as logs:
        results = await supervisor_http.run_phase(ctx, phase, deadline or Deadline(30), process)
    return results, logs, ctx


async def _cancelled_once_logged(tmp_path: Path, request: str, text: str, *, count: int = 1) -> str:
    """Run ``request`` (one, without a timeout of its own) until the plugin
    has logged ``text`` ``count`` times, then end the shutdown deadline; return the plugin's
    warning about the cancellation.  Waits on what the plugin says rather
    than on a timeout that a loaded machine might overrun."""
    deadline = Deadline(120)
    logged = LogRecords()

    async def end_when_logged() -> None:
        with trio.fail_after(60):
            await logged.wait_for(text, count=count)
        deadline.expire("second SIGTERM")

    logger = logging.getLogger("supervisor.plugin.http")
    logger.addHandler(logged)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(end_when_logged)
            results, logs, _ = await _run(tmp_path, request, deadline=deadline)
    finally:
        logger.removeHandler(logged)
    assert results == []
    (warning,) = logs.at(logging.WARNING)
    return warning


async def test_post_sends_body_and_headers(tmp_path: Path, server: Server) -> None:
    results, logs, ctx = await _run(
        tmp_path,
        f"""\
      - phase: pre_stop
        url: {server.url}/drain?wait=1
        method: POST
        body: "stop taking work"
        headers: {{X-Token: secret, Content-Type: text/plain}}
        expect: [200, 202]
""",
    )
    server_saw = server.received[0]
    assert (server_saw.method, server_saw.path, server_saw.body) == (
        "POST",
        "/drain?wait=1",
        b"stop taking work",
    )
    assert server_saw.headers["X-Token"] == "secret"
    assert server_saw.headers["Content-Type"] == "text/plain"
    assert server_saw.headers["User-Agent"] == "pid1-supervisor-http"
    assert [(r.outcome, r.status, r.attempts) for r in results] == [("ok", 200, 1)]
    (message,) = logs.at(logging.INFO)
    # Query values are hidden in the log and the timeline: they may be tokens.
    assert message.startswith(f"POST {server.url}/drain?wait=***: status 200: answer 1 after 1 attempt(s) in ")
    (step,) = ctx.timeline.steps  # type: ignore[attr-defined]
    assert (step.phase, step.name, step.plugin, step.outcome, step.detail) == (
        "pre_stop",
        f"POST {server.url}/drain?wait=***",
        "http",
        "ok",
        "status 200",
    )


async def test_retries_until_an_expected_status(tmp_path: Path, server: Server) -> None:
    server.statuses = [503, 503, 202]
    results, logs, _ = await _run(
        tmp_path,
        f"      - {{phase: pre_stop, url: '{server.url}/drain', method: POST, retry_interval: 50ms, expect: 202}}\n",
    )
    assert [(r.outcome, r.status, r.attempts) for r in results] == [("ok", 202, 3)]
    assert len(server.received) == 3
    # The first failure explains the wait; later ones stay at debug level.
    assert logs.at(logging.INFO)[0] == (
        f"POST {server.url}/drain: status 503: answer 1 (expected 202); retrying every 50ms"
    )
    assert len(logs.at(logging.DEBUG)) == 1


async def test_status_classes(tmp_path: Path, server: Server) -> None:
    server.statuses = [204]
    results, _, _ = await _run(tmp_path, f"      - {{phase: pre_stop, url: '{server.url}/'}}\n")
    assert results[0].outcome == "ok"  # the default is 2xx
    server.statuses = [404]
    results, _, _ = await _run(tmp_path, f"      - {{phase: pre_stop, url: '{server.url}/', expect: [2xx, 4XX]}}\n")
    assert results[0].outcome == "ok"


async def test_gives_up_at_its_timeout_and_says_why(tmp_path: Path, server: Server) -> None:
    server.statuses = [500]
    start = trio.current_time()
    # 2 s: time enough for the first answer on a loaded machine.
    results, logs, ctx = await _run(
        tmp_path,
        f"      - {{phase: post_stop, url: '{server.url}/x', timeout: 2s, retry_interval: 100ms, expect: [200]}}\n",
        "post_stop",
    )
    assert trio.current_time() - start >= 2
    (result,) = results
    assert result.outcome == "timeout"
    assert result.attempts >= 1
    # The last answer the plugin read (an attempt the timeout cut has none).
    assert re.fullmatch(rf"{result.attempts} attempt\(s\), last: status 500: answer \d+", result.detail), result.detail
    assert any(
        m.startswith(f"GET {server.url}/x: gave up after {result.attempts} attempt(s)")
        for m in logs.at(logging.WARNING)
    )
    assert ctx.timeline.steps[0].outcome == "timeout"  # type: ignore[attr-defined]


async def test_connection_refused_is_retried(tmp_path: Path) -> None:
    port = _closed_port()
    request = f"      - {{phase: pre_stop, url: 'http://127.0.0.1:{port}/', retry_interval: 50ms}}\n"
    warning = await _cancelled_once_logged(tmp_path, request, "connection refused (expected 2xx); retrying", count=2)
    assert re.fullmatch(
        rf"GET http://127.0.0.1:{port}/: cancelled by the shutdown deadline after ([2-9]|\d\d+) attempt\(s\); "
        "last: connection refused",
        warning,
    ), warning


async def test_a_slow_server_hits_the_attempt_timeout(tmp_path: Path, server: Server) -> None:
    server.hang = True
    start = trio.current_time()
    results, _, _ = await _run(
        tmp_path,
        f"      - {{phase: pre_stop, url: '{server.url}/', attempt_timeout: 200ms, "
        "timeout: 1s, retry_interval: 100ms}\n",
    )
    assert 1 <= trio.current_time() - start < 10
    assert results[0].outcome == "timeout"
    assert results[0].detail.endswith("last: no response within 200ms")


async def test_the_deadline_cancels_a_request_without_timeout(tmp_path: Path, server: Server) -> None:
    server.statuses = [503]
    start = trio.current_time()
    results, logs, ctx = await _run(
        tmp_path,
        f"      - {{phase: pre_stop, url: '{server.url}/', retry_interval: 100ms}}\n",
        deadline=Deadline(1.0),
    )
    # 1 s budget less its 0.1 s reserve.
    assert 0.9 <= trio.current_time() - start < 10
    assert results == []
    assert any(
        m.startswith(f"GET {server.url}/: cancelled by the shutdown deadline after ") for m in logs.at(logging.WARNING)
    )
    assert ctx.timeline.steps[0].outcome == "cancelled"  # type: ignore[attr-defined]


async def test_requests_of_a_phase_run_concurrently(tmp_path: Path, server: Server) -> None:
    # Each request is answered only once all four are in the server at the
    # same time: one after another, the first would wait for ever (500).
    server.together = 4
    results, _, _ = await _run(
        tmp_path,
        "".join(
            f"      - {{phase: pre_stop, url: '{server.url}/{i}', attempt_timeout: 15s, timeout: 20s}}\n"
            for i in range(4)
        ),
    )
    assert [(r.outcome, r.attempts) for r in results] == [("ok", 1)] * 4


async def test_json_body_and_credentials_in_the_url(tmp_path: Path, server: Server) -> None:
    url = server.url.replace("http://", "http://ops:p%40ss@")
    results, _, ctx = await _run(
        tmp_path,
        f"""\
      - phase: pre_stop
        url: {url}/drain
        json: {{reason: shutdown, grace: 30}}
""",
    )
    saw = server.received[0]
    assert saw.method == "POST"  # a body makes POST the default
    assert saw.headers["Content-Type"] == "application/json"
    assert json.loads(saw.body) == {"reason": "shutdown", "grace": 30}
    assert saw.headers["Authorization"] == "Basic " + base64.b64encode(b"ops:p@ss").decode()
    assert results[0].outcome == "ok"
    # The password stays out of the log and the timeline.
    assert ctx.timeline.steps[0].name == f"POST http://ops:***@127.0.0.1:{server.port}/drain"  # type: ignore[attr-defined]


async def test_per_process_requests(tmp_path: Path, server: Server) -> None:
    requests = f"      - {{phase: after_process_stop, process: web, url: '{server.url}/released'}}\n"
    results, _, _ = await _run(tmp_path, requests, "after_process_stop", process=FakeProcess("web"))
    assert results[0].outcome == "ok"
    assert server.received[0].path == "/released"
    results, _, _ = await _run(tmp_path, requests, "after_process_stop", process=FakeProcess("other"))
    assert results == []


async def test_hooks_dispatch_to_their_phase(tmp_path: Path, server: Server) -> None:
    text = "processes:\n  - {name: web, command: 'true'}\nplugins:\n  http:\n    requests:\n" + "".join(
        f"      - {{phase: {p}, url: '{server.url}/{p}'{_WEB if 'proc' in p else ''}}}\n"
        for p in supervisor_http.PHASES
    )
    settings, config = configure(supervisor_http.plugin, tmp_path, text, "http")
    ctx = make_context("http", settings, config)
    await call_every_phase(supervisor_http.plugin, ctx, process=FakeProcess("web"), status=None)
    assert [r.path for r in server.received] == [f"/{p}" for p in supervisor_http.PHASES]


def test_settings_problems_are_reported_at_their_positions(tmp_path: Path) -> None:
    text = """\
processes:
  - {name: web, command: "true"}
plugins:
  http:
    requests:
      - {phase: pre_stop, url: "ftp://example/"}
      - {phase: pre_stop, url: "http://127.0.0.1:99999/"}
      - {phase: pre_stop, url: "http://x/", method: FETCH}
      - {phase: pre_stop, url: "http://x/", expect: [200, 2xy, 700]}
      - {phase: pre_stop, url: "http://x/", body: a, json: {b: 1}}
      - {phase: after_process_stop, url: "http://x/"}
      - {phase: pre_stop, url: "http://x/", retry_interval: often, tls_verify: maybe}
      - {phase: pre_stop}
"""
    problems = configure_problems(supervisor_http.plugin, tmp_path, text, "http")
    base = str(tmp_path / "cfg.yaml")
    assert [p.removeprefix(base) for p in problems] == [
        ":6:32: plugins.http.requests[0].url: expected an http:// or https:// URL such as "
        "http://127.0.0.1:8080/healthz, got 'ftp://example/'",
        ":7:32: plugins.http.requests[1].url: invalid URL 'http://127.0.0.1:99999/': Port out of range 0-65535",
        ":8:53: plugins.http.requests[2].method: unknown method 'FETCH' "
        "(use one of GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS)",
        ":9:53: plugins.http.requests[3].expect: invalid status '2xy': "
        "use a code (200), a class (2xx) or a list of them",
        ":9:53: plugins.http.requests[3].expect: invalid status '700': "
        "use a code (200), a class (2xx) or a list of them",
        ":10:60: plugins.http.requests[4].json: give either 'body' or 'json', not both",
        ":11:9: plugins.http.requests[5]: missing required key 'process' "
        "(after_process_stop requests belong to a process)",
        ":12:61: plugins.http.requests[6].retry_interval: invalid duration 'often': "
        "use a number of seconds or a number with ms, s, m or h (30, 30s, 500ms, 1.5s, 2m)",
        ":12:80: plugins.http.requests[6].tls_verify: expected true or false, got 'maybe'",
        ":13:9: plugins.http.requests[7]: missing required key 'url'",
    ]


def test_registered_as_an_entry_point() -> None:
    (entry,) = [ep for ep in importlib.metadata.entry_points(group="supervisor.plugins") if ep.name == "http"]
    assert entry.load() is supervisor_http.plugin


@pytest.fixture
def tls_server(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """An HTTPS server on 127.0.0.1 with a certificate from a throwaway CA;
    yields its URL and the CA's PEM file."""
    ca = trustme.CA()
    ca_file = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))

    class Handler(QuietHandler):
        def do_GET(self) -> None:
            self.send_response(204)
            self.end_headers()

    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(context)
    with serve_http(Handler, tls=context) as port:
        yield f"https://127.0.0.1:{port}/ready", ca_file


async def test_https_checks_the_certificate(tmp_path: Path, tls_server: tuple[str, Path]) -> None:
    url, ca_file = tls_server
    results, _, _ = await _run(tmp_path, f"      - {{phase: pre_stop, url: '{url}', ca_file: '{ca_file}'}}\n")
    assert [(r.outcome, r.status) for r in results] == [("ok", 204)]
    # Without the CA the certificate is unknown: retried, and reported.
    warning = await _cancelled_once_logged(
        tmp_path, f"      - {{phase: pre_stop, url: '{url}'}}\n", "certificate verify failed"
    )
    assert warning.endswith("last: certificate verify failed: unable to get local issuer certificate"), warning
    # Unless the user turns verification off.
    results, _, _ = await _run(tmp_path, f"      - {{phase: pre_stop, url: '{url}', tls_verify: false}}\n")
    assert results[0].outcome == "ok"


async def test_a_missing_ca_file_is_reported(tmp_path: Path, tls_server: tuple[str, Path]) -> None:
    url, _ = tls_server
    missing = tmp_path / "not-mounted-yet.pem"
    warning = await _cancelled_once_logged(
        tmp_path, f"      - {{phase: pre_stop, url: '{url}', ca_file: '{missing}'}}\n", "cannot read ca_file"
    )
    assert warning.endswith(f"last: cannot read ca_file: No such file or directory: {missing}"), warning
