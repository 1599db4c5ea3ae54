"""Readiness checks against real listeners, files and commands."""

from __future__ import annotations

import logging
import os
import socket
import ssl
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import pytest
import trio
import trio.testing
import trustme

from supervisor._procstat import read_stat
from supervisor.config._model import ReadyCheck
from supervisor.runtime import readiness
from supervisor.runtime.readiness import ReadyProbe, describe

FAST = 0.02  # probe interval for real-clock tests


def own_zombies() -> list[int]:
    """PIDs of this process's children that nobody has reaped."""
    stats = (read_stat(int(entry)) for entry in os.listdir("/proc") if entry.isdigit())
    return [stat.pid for stat in stats if stat is not None and stat.zombie and stat.ppid == os.getpid()]


async def wait_gone(pid: int) -> None:
    """Return once ``pid`` has exited (a zombie counts): a pidfd turns
    readable then, for any process, not only our own children."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    try:
        await trio.lowlevel.wait_readable(fd)
    finally:
        os.close(fd)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def never_ready(probe: ReadyProbe, failures: int = 3) -> None:
    """Let ``probe`` fail ``failures`` probes in a row, however long a busy
    machine takes for them, and check that its wait never returned."""
    failed = 0
    enough = trio.Event()
    real_probe = probe.probe

    async def counted() -> str | None:
        nonlocal failed
        failure = await real_probe()
        assert failure is not None, "the check passed but should not have"
        failed += 1
        if failed >= failures:
            enough.set()
        return failure

    async def waiting() -> None:
        await probe.wait()
        raise AssertionError("the check passed but should not have")

    probe.probe = counted  # type: ignore[method-assign]
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(waiting)
            with trio.fail_after(60):
                await enough.wait()
            nursery.cancel_scope.cancel()
    finally:
        del probe.probe  # the class's method again


async def ready(check: ReadyCheck, *, env: dict[str, str] | None = None, cwd: str | None = None) -> None:
    """Wait for ``check`` to pass, within a bound no busy machine reaches."""
    with trio.fail_after(30):
        await ReadyProbe(check, env=env, cwd=cwd).wait()


# -- describe -------------------------------------------------------


@pytest.mark.parametrize(
    ("check", "text"),
    [
        (ReadyCheck("socket", "/run/x.sock"), "socket /run/x.sock accepts connections"),
        (ReadyCheck("tcp", "127.0.0.1:8080"), "tcp 127.0.0.1:8080 accepts connections"),
        (ReadyCheck("tcp", "[::1]:80"), "tcp [::1]:80 accepts connections"),
        (
            ReadyCheck("http", "http://127.0.0.1/healthz"),
            "http GET http://127.0.0.1/healthz answers 2xx/3xx",
        ),
        (
            ReadyCheck("http", "https://probe:s%3Acret@[::1]:8443/ready"),
            "http GET https://probe:***@[::1]:8443/ready answers 2xx/3xx",
        ),
        (ReadyCheck("exec", ("pg_isready", "-h", "my db")), "exec `pg_isready -h 'my db'` exits 0"),
        (ReadyCheck("file", "/tmp/ready"), "file /tmp/ready exists"),
        (ReadyCheck("after", 2.0), "after 2s"),
        (ReadyCheck("after", 0.5), "after 500ms"),
    ],
)
def test_describe(check: ReadyCheck, text: str) -> None:
    assert describe(check) == text


def test_wrong_target_type_is_a_clear_type_error() -> None:
    with pytest.raises(TypeError, match="argv tuple"):
        describe(ReadyCheck("exec", "true"))


# -- tcp -------------------------------------------------------------------


async def test_tcp_ready_when_listener_accepts() -> None:
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    await ready(ReadyCheck("tcp", f"127.0.0.1:{port}", interval=FAST))
    await trio.aclose_forcefully(listeners[0])


async def test_tcp_waits_for_the_listener_to_appear() -> None:
    port = free_port()
    probe = ReadyProbe(ReadyCheck("tcp", f"127.0.0.1:{port}", interval=FAST))
    await never_ready(probe)
    assert probe.last_failure == "connection refused"
    listeners = await trio.open_tcp_listeners(port, host="127.0.0.1")
    try:
        with trio.fail_after(30):
            await probe.wait()
    finally:
        await trio.aclose_forcefully(listeners[0])
    assert probe.attempts > 3


async def test_tcp_refused_is_never_ready() -> None:
    probe = ReadyProbe(ReadyCheck("tcp", f"127.0.0.1:{free_port()}", interval=FAST))
    await never_ready(probe)
    assert probe.last_failure == "connection refused"
    assert probe.attempts >= 3


async def test_tcp_ipv6_literal() -> None:
    try:
        listeners = await trio.open_tcp_listeners(0, host="::1")
    except OSError as exc:  # pragma: no cover - depends on the machine
        pytest.skip(f"no IPv6 loopback here: {exc}")
    port = listeners[0].socket.getsockname()[1]
    await ready(ReadyCheck("tcp", f"[::1]:{port}", interval=FAST))
    await trio.aclose_forcefully(listeners[0])


async def test_tcp_hostname_is_resolved() -> None:
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    await ready(ReadyCheck("tcp", f"localhost:{port}", interval=FAST))
    await trio.aclose_forcefully(listeners[0])


# -- unix sockets -------------------------------------------------------------


def unix_listener(address: str) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(address)
    sock.listen()
    return sock


async def test_socket_ready_when_it_accepts(tmp_path: Path) -> None:
    path = tmp_path / "app.sock"
    probe = ReadyProbe(ReadyCheck("socket", str(path), interval=FAST))
    await never_ready(probe)
    assert probe.last_failure == "no such file or directory"
    with unix_listener(str(path)), trio.fail_after(30):
        await probe.wait()


async def test_socket_file_without_listener_is_not_ready(tmp_path: Path) -> None:
    path = tmp_path / "stale.sock"
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(path))  # the file exists, but nobody listens
    try:
        probe = ReadyProbe(ReadyCheck("socket", str(path), interval=FAST))
        await never_ready(probe)
        assert probe.last_failure == "connection refused"
    finally:
        stale.close()


async def test_socket_relative_path_is_taken_from_cwd(tmp_path: Path) -> None:
    with unix_listener(str(tmp_path / "rel.sock")):
        await ready(ReadyCheck("socket", "rel.sock", interval=FAST), cwd=str(tmp_path))


async def test_socket_in_the_abstract_namespace() -> None:
    name = f"pid1-supervisor-test-{os.getpid()}"
    probe = ReadyProbe(ReadyCheck("socket", f"@{name}", interval=FAST))
    await never_ready(probe)
    with unix_listener("\0" + name), trio.fail_after(30):
        await probe.wait()


# -- http ---------------------------------------------------------------------


@dataclass
class HttpServer:
    """A tiny HTTP/1.1 server: ``routes`` maps a path to a status code, or to
    None for "never answer"."""

    routes: dict[str, int | None]
    port: int = 0
    requests: list[tuple[str, str, dict[str, str]]] = field(default_factory=list)

    async def handle(self, stream: trio.abc.Stream) -> None:
        try:
            data = b""
            while b"\r\n\r\n" not in data and len(data) < 65536:
                chunk = await stream.receive_some()
                if not chunk:
                    return
                data += chunk
            head = data.split(b"\r\n\r\n")[0].decode("latin-1").split("\r\n")
            method, target, _ = head[0].split(" ", 2)
            headers = dict(line.split(": ", 1) for line in head[1:])
            self.requests.append((method, target, headers))
            status = self.routes.get(target.split("?")[0], 404)
            if status is None:
                await trio.sleep_forever()
            location = "Location: /elsewhere\r\n" if 300 <= status < 400 else ""
            await stream.send_all(
                f"HTTP/1.1 {status} X\r\n{location}Content-Length: 0\r\nConnection: close\r\n\r\n".encode()
            )
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        finally:
            await trio.aclose_forcefully(stream)


@pytest.fixture
async def http_server(nursery: trio.Nursery) -> AsyncIterator[HttpServer]:
    server = HttpServer({"/ok": 200, "/redirect": 302, "/error": 500, "/hang": None})
    listeners = await nursery.start(partial(trio.serve_tcp, server.handle, 0, host="127.0.0.1"))
    server.port = listeners[0].socket.getsockname()[1]
    yield server


async def test_http_2xx_is_ready(http_server: HttpServer) -> None:
    url = f"http://127.0.0.1:{http_server.port}/ok?probe=1"
    await ready(ReadyCheck("http", url, interval=FAST))
    method, target, headers = http_server.requests[-1]
    assert (method, target) == ("GET", "/ok?probe=1")
    assert headers["Host"] == f"127.0.0.1:{http_server.port}"


async def test_http_3xx_is_ready_and_not_followed(http_server: HttpServer) -> None:
    await ready(ReadyCheck("http", f"http://127.0.0.1:{http_server.port}/redirect", interval=FAST))
    assert [target for _, target, _ in http_server.requests] == ["/redirect"]


async def test_http_5xx_waits_until_it_turns_2xx(http_server: HttpServer) -> None:
    url = f"http://127.0.0.1:{http_server.port}/error"
    probe = ReadyProbe(ReadyCheck("http", url, interval=FAST))
    await never_ready(probe)
    assert probe.last_failure == "HTTP 500"
    http_server.routes["/error"] = 204
    with trio.fail_after(30):
        await probe.wait()


async def test_http_404_is_not_ready(http_server: HttpServer) -> None:
    probe = ReadyProbe(ReadyCheck("http", f"http://127.0.0.1:{http_server.port}/missing", interval=FAST))
    await never_ready(probe)
    assert probe.last_failure == "HTTP 404"


async def test_http_credentials_in_url_become_basic_auth(http_server: HttpServer) -> None:
    url = f"http://probe:s%3Acret@127.0.0.1:{http_server.port}/ok"
    await ready(ReadyCheck("http", url, interval=FAST))
    assert http_server.requests[-1][2]["Authorization"] == "Basic cHJvYmU6czpjcmV0"


async def test_http_hanging_server_is_bounded_per_probe(
    http_server: HttpServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(readiness, "HTTP_TIMEOUT", 0.2)
    probe = ReadyProbe(ReadyCheck("http", f"http://127.0.0.1:{http_server.port}/hang", interval=FAST))
    await never_ready(probe)
    assert probe.last_failure in ("no answer within 200ms", "timed out")
    assert probe.attempts >= 3  # each probe gave up on its own


async def test_http_connection_refused() -> None:
    probe = ReadyProbe(ReadyCheck("http", f"http://127.0.0.1:{free_port()}/", interval=FAST))
    await never_ready(probe)
    assert probe.last_failure == "connection refused"


async def test_https_with_a_self_signed_certificate(nursery: trio.Nursery) -> None:
    ca = trustme.CA()
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(context)
    server = HttpServer({"/healthz": 200})
    listeners = await nursery.start(partial(trio.serve_ssl_over_tcp, server.handle, 0, context, host="127.0.0.1"))
    port = listeners[0].transport_listener.socket.getsockname()[1]
    await ready(ReadyCheck("http", f"https://127.0.0.1:{port}/healthz", interval=FAST))
    assert server.requests[-1][1] == "/healthz"


# -- exec ---------------------------------------------------------------------


async def test_exec_exit_zero_is_ready() -> None:
    await ready(ReadyCheck("exec", ("true",), interval=FAST))
    assert own_zombies() == []


async def test_exec_nonzero_is_not_ready() -> None:
    probe = ReadyProbe(ReadyCheck("exec", ("sh", "-c", "exit 3"), interval=FAST))
    await never_ready(probe)
    assert probe.last_failure == "exited with 3"
    assert probe.attempts >= 2
    assert own_zombies() == []


async def test_exec_runs_with_the_process_env_and_cwd(tmp_path: Path) -> None:
    (tmp_path / "marker").write_text("")
    check = ReadyCheck("exec", ("sh", "-c", 'test "$READY_FLAG" = yes && test -f marker'))
    path = os.environ["PATH"]
    await ready(check, env={"PATH": path, "READY_FLAG": "yes"}, cwd=str(tmp_path))
    probe = ReadyProbe(check, env={"PATH": path, "READY_FLAG": "no"}, cwd=str(tmp_path))
    await never_ready(probe)


async def test_exec_passes_once_the_condition_holds(tmp_path: Path) -> None:
    flag = tmp_path / "flag"
    probe = ReadyProbe(ReadyCheck("exec", ("test", "-e", str(flag)), interval=FAST))
    await never_ready(probe)
    flag.write_text("")
    with trio.fail_after(30):
        await probe.wait()


async def test_exec_missing_command_says_so(caplog: pytest.LogCaptureFixture) -> None:
    probe = ReadyProbe(ReadyCheck("exec", ("no-such-ready-command-xyz",), interval=FAST))
    with caplog.at_level(logging.WARNING, logger="supervisor.readiness"):
        await never_ready(probe)
    assert probe.last_failure == "no-such-ready-command-xyz: command not found"
    assert probe.attempts > 2
    # said once, not at every probe
    assert [r.getMessage() for r in caplog.records] == [
        "ready check exec `no-such-ready-command-xyz` exits 0 cannot run: no-such-ready-command-xyz: command not found"
    ]


async def test_exec_missing_cwd_says_so(tmp_path: Path) -> None:
    missing = str(tmp_path / "nope")
    probe = ReadyProbe(ReadyCheck("exec", ("true",), interval=FAST), cwd=missing)
    await never_ready(probe)
    assert probe.last_failure == f"working directory {missing} does not exist"


async def test_exec_killed_by_signal_is_reported() -> None:
    probe = ReadyProbe(ReadyCheck("exec", ("sh", "-c", "kill -KILL $$"), interval=FAST))
    await never_ready(probe)
    assert probe.last_failure == "killed by SIGKILL"


async def test_exec_hung_command_and_its_children_are_killed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Long enough for the shell to start its child and write both PIDs on a
    # busy machine, short enough to keep the test quick.
    monkeypatch.setattr(readiness, "EXEC_TIMEOUT", 3.0)
    pids = tmp_path / "pids"
    script = f"sleep 60 & echo $! >> {pids}; echo $$ >> {pids}; wait"
    probe = ReadyProbe(ReadyCheck("exec", ("sh", "-c", script), interval=FAST))
    await never_ready(probe, failures=1)
    assert probe.last_failure == "did not finish within 3s (killed)"
    started = [int(line) for line in pids.read_text().split()]
    assert len(started) == 2
    with trio.fail_after(30):
        for pid in started:
            await wait_gone(pid)
    assert own_zombies() == []


# -- file and after -------------------------------------------------------------


async def test_file_ready_once_it_exists(tmp_path: Path) -> None:
    path = tmp_path / "ready"
    probe = ReadyProbe(ReadyCheck("file", str(path), interval=FAST))
    await never_ready(probe)
    assert probe.last_failure == "does not exist"
    path.write_text("")
    with trio.fail_after(30):
        await probe.wait()


async def test_file_relative_to_cwd(tmp_path: Path) -> None:
    (tmp_path / "ready").mkdir()
    await ready(ReadyCheck("file", "ready", interval=FAST), cwd=str(tmp_path))


async def test_after_waits_exactly_the_delay(autojump_clock: trio.testing.MockClock) -> None:
    start = trio.current_time()
    await ReadyProbe(ReadyCheck("after", 2.5)).wait()
    assert trio.current_time() - start == pytest.approx(2.5)


async def test_probes_every_interval_until_ready(tmp_path: Path, autojump_clock: trio.testing.MockClock) -> None:
    path = tmp_path / "ready"
    probe = ReadyProbe(ReadyCheck("file", str(path), interval=0.5))
    start = trio.current_time()

    async def create_at_2_2() -> None:
        await trio.sleep(2.2)
        path.write_text("")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(create_at_2_2)
        await probe.wait()
    # probes at 0, 0.5, ... 2.0 fail; the one at 2.5 passes
    assert trio.current_time() - start == pytest.approx(2.5)
    assert probe.attempts == 6


async def test_wait_never_returns_while_failing(autojump_clock: trio.testing.MockClock, tmp_path: Path) -> None:
    probe = ReadyProbe(ReadyCheck("file", str(tmp_path / "never"), interval=0.1))
    with trio.move_on_after(600) as scope:
        await probe.wait()
    assert scope.cancelled_caught
    assert 5_900 <= probe.attempts <= 6_001


async def test_caller_timeout_with_fail_after(autojump_clock: trio.testing.MockClock) -> None:
    check = ReadyCheck("socket", "/nonexistent/pid1-supervisor.sock", timeout=60.0)
    start = trio.current_time()
    with pytest.raises(trio.TooSlowError):
        with trio.fail_after(check.timeout):
            await ReadyProbe(check).wait()
    assert trio.current_time() - start == pytest.approx(60.0)


@pytest.mark.parametrize(
    "make_check",
    [
        lambda: ReadyCheck("tcp", "127.0.0.1:9", interval=FAST),
        lambda: ReadyCheck("exec", ("sleep", "30"), interval=FAST),
        lambda: ReadyCheck("http", "http://127.0.0.1:9/", interval=FAST),
    ],
)
async def test_cancelling_a_wait_is_prompt(make_check: Callable[[], ReadyCheck]) -> None:
    start = trio.current_time()
    with trio.move_on_after(0.3):
        await ReadyProbe(make_check()).wait()
    assert trio.current_time() - start < 3.0
    assert own_zombies() == []
