"""An open-loop HTTP load generator that accounts for every request.

    python loadgen.py URL --rate 100 --count 3000 --max-seconds 60 --out FILE

Request ``i`` starts at ``start + i / rate`` whatever became of the earlier
ones (open loop: a slow or dead backend does not slow the load down, as real
clients do not), each on a new TCP connection (``Connection: close``), so
every request goes through kube-proxy's rules afresh instead of riding an
established, already-translated connection.  Each request ends as one of:

* ``ok``        a 2xx response, read to its end;
* ``refused``   the connection was refused (RST to the SYN);
* ``reset``     the connection was reset or closed before a full response;
* ``timeout``   no full response within ``--timeout`` (connect included);
* ``http_5xx``  a 5xx status; ``http_other`` any other non-2xx status;
* ``error``     anything else (the exception's name is kept).

SIGTERM (or SIGINT) stops the load: no new request starts, those in flight
finish or time out.  The load is bounded three ways: ``--count`` requests,
``--max-seconds`` of issuing, ``--timeout`` per request.  The output is one
JSON object: the settings and one record per request, ``[start_ns, end_ns,
outcome, detail]`` on CLOCK_MONOTONIC (the same clock in every namespace of
the machine), ``detail`` the body's first line (the pod's name) or the error.
Run as a script inside a network namespace; it needs only trio.
"""

from __future__ import annotations

import argparse
import errno
import json
import math
import signal
import sys
import time
import urllib.parse
from pathlib import Path

import trio

OUTCOMES = ("ok", "refused", "reset", "timeout", "http_5xx", "http_other", "error")


async def one_request(host: str, port: int, path: str, timeout: float) -> tuple[str, str]:
    request = f"GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode()
    with trio.move_on_after(timeout) as scope:
        sock = trio.socket.socket(trio.socket.AF_INET, trio.socket.SOCK_STREAM)
        try:
            await sock.connect((host, port))
        except OSError as exc:
            sock.close()
            if exc.errno == errno.ECONNREFUSED:
                return "refused", "connection refused"
            if exc.errno == errno.ECONNRESET:
                return "reset", "reset while connecting"
            return "error", f"connect: {exc}"
        async with trio.SocketStream(sock) as stream:
            try:
                await stream.send_all(request)
                data = b""
                while chunk := await stream.receive_some(65536):
                    data += chunk
            except (trio.BrokenResourceError, OSError) as exc:
                return "reset", type(exc).__name__
        return classify(data)
    assert scope.cancelled_caught
    return "timeout", f"no response in {timeout:g}s"


def classify(data: bytes) -> tuple[str, str]:
    head, _, body = data.partition(b"\r\n\r\n")
    status_line = head.split(b"\r\n", 1)[0].decode(errors="replace")
    parts = status_line.split()
    if len(parts) < 2 or not parts[1].isdigit():
        return "reset", f"no complete response ({len(data)} bytes)"
    status = int(parts[1])
    length = _content_length(head)
    if length is not None and len(body) < length:
        return "reset", f"body cut at {len(body)} of {length} bytes"
    detail = body.decode(errors="replace").split("\n", 1)[0]
    if 200 <= status < 300:
        return "ok", detail
    if status >= 500:
        return "http_5xx", f"{status} {detail}"
    return "http_other", f"{status} {detail}"


def _content_length(head: bytes) -> int | None:
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length" and value.strip().isdigit():
            return int(value.strip())
    return None


async def run(url: str, rate: float, count: int, max_seconds: float, timeout: float) -> list[list[object]]:
    parts = urllib.parse.urlsplit(url)
    host, port, path = parts.hostname or "127.0.0.1", parts.port or 80, parts.path or "/"
    records: list[list[object]] = []

    async def timed() -> None:
        started = time.monotonic_ns()
        try:
            outcome, detail = await one_request(host, port, path, timeout)
        except Exception as exc:  # counted, never lost
            outcome, detail = "error", f"{type(exc).__name__}: {exc}"
        records.append([started, time.monotonic_ns(), outcome, detail])

    async with trio.open_nursery() as outer:
        stop = trio.Event()
        outer.start_soon(_stop_on_signal, stop)
        # Each request carries its own timeout, so this nursery closes at
        # most ``timeout`` after the last request started.
        async with trio.open_nursery() as requests:
            origin = trio.current_time()
            for i in range(min(count, math.floor(max_seconds * rate))):
                with trio.move_on_at(origin + i / rate):
                    await stop.wait()
                if stop.is_set():
                    break
                requests.start_soon(timed)
        outer.cancel_scope.cancel()
    return records


async def _stop_on_signal(stop: trio.Event) -> None:
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for _ in signals:
            stop.set()
            return


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("url")
    parser.add_argument("--rate", type=float, required=True, help="requests per second")
    parser.add_argument("--count", type=int, required=True, help="most requests")
    parser.add_argument("--max-seconds", type=float, required=True, help="longest time issuing requests")
    parser.add_argument("--timeout", type=float, default=2.0, help="per request, connect included")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    ready = args.out.with_suffix(".started")
    ready.write_text(str(time.monotonic_ns()))
    records = trio.run(run, args.url, args.rate, args.count, args.max_seconds, args.timeout)
    records.sort(key=lambda record: int(record[0]))  # type: ignore[call-overload]
    settings = {"url": args.url, "rate": args.rate, "count": args.count, "timeout": args.timeout}
    tmp = args.out.with_suffix(".tmp")
    tmp.write_text(json.dumps({"settings": settings, "requests": records}))
    tmp.rename(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
