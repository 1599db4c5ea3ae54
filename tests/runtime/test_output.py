"""The orchestrator's output never blocks: a sink nobody reads costs lines,
counted and reported once it drains; pumped lines reach their observers."""

from __future__ import annotations

import os
import re
import select
import time

import trio
import trio.testing

from supervisor.runtime.output import (
    LINE_LIMIT,
    OutputWriter,
    add_line_observer,
    notify_line,
    pump_lines,
    remove_line_observer,
)


def test_write_never_blocks_on_a_full_pipe_and_reports_the_drops() -> None:
    read_end, write_end = os.pipe()
    writer = OutputWriter(write_end, "stdout", capacity=4096)
    line = b"x" * 99 + b"\n"
    started = time.monotonic()
    accepted = sum(writer.write(line) for _ in range(5000))  # 500 kB into a 64 kB pipe
    # A blocking write would never return (nothing reads the pipe yet): any
    # bound a busy machine cannot reach tells the two apart.
    assert time.monotonic() - started < 10.0
    assert writer.dropped == 5000 - accepted > 0
    # The reader comes back: everything queued arrives, and the drops are
    # reported (in one or more notices, as the sink took data in between).
    # A notice counts every drop so far, so it can come before lines that
    # were queued while the sink was stuck: read until both are in, or
    # until nothing more comes.
    received = b""
    deadline = time.monotonic() + 10
    while _reported(received) < writer.dropped or received.count(line) < accepted:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([read_end], [], [], left)[0]:
            break
        received += os.read(read_end, 1 << 20)
    assert _reported(received) == writer.dropped
    assert received.count(line) == accepted
    os.close(read_end)
    os.close(write_end)


def _reported(output: bytes) -> int:
    notices = re.findall(rb"supervisor: (\d+) line\(s\) of output dropped: stdout was not being read\n", output)
    return sum(int(n) for n in notices)


def test_flush_gives_up_on_a_stuck_sink() -> None:
    read_end, write_end = os.pipe()
    writer = OutputWriter(write_end, "stderr", capacity=1 << 20)
    for _ in range(2000):
        writer.write(b"y" * 99 + b"\n")
    started = time.monotonic()
    assert writer.flush(0.2) is False
    assert time.monotonic() - started < 10.0  # gave up, where a stuck flush never returns
    os.close(read_end)  # the writer thread gets EPIPE and stops
    assert writer.flush(5.0) is True
    assert writer.write(b"late\n") is False
    os.close(write_end)


def test_a_broken_sink_stops_the_thread_without_raising() -> None:
    read_end, write_end = os.pipe()
    os.close(read_end)
    writer = OutputWriter(write_end, "stdout")
    writer.write(b"to nobody\n")
    assert writer.flush(5.0)
    thread = writer._thread
    assert thread is not None
    thread.join(5.0)
    assert not thread.is_alive()
    os.close(write_end)


def test_pump_prefixes_lines_and_shows_each_to_the_observers() -> None:
    read_end, write_end = os.pipe()
    writer = OutputWriter(write_end, "stdout")
    seen: list[tuple[str, str, bytes]] = []
    registered: list[tuple[str, str, bytes]] = []

    def observer(name: str, stream: str, line: bytes) -> None:
        registered.append((name, stream, line))

    def broken(name: str, stream: str, line: bytes) -> None:
        raise RuntimeError("an observer's bug")

    def on_line(name: str, stream: str, line: bytes) -> None:
        seen.append((name, stream, line))
        notify_line(name, stream, line)

    async def main() -> None:
        send, receive = trio.testing.memory_stream_one_way_pair()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(
                lambda: pump_lines(receive, writer, b"[web] ", process_name="web", stream="stdout", on_line=on_line)
            )
            await send.send_all(b"one\ntw")
            await send.send_all(b"o\nthree")
            await send.aclose()

    add_line_observer(broken)
    add_line_observer(observer)
    try:
        trio.run(main)
    finally:
        remove_line_observer(observer)
        remove_line_observer(broken)
    assert writer.flush(5.0)
    assert os.read(read_end, 4096) == b"[web] one\n[web] two\n[web] three\n"
    expected = [("web", "stdout", b"one"), ("web", "stdout", b"two"), ("web", "stdout", b"three")]
    assert seen == expected
    assert registered == expected
    os.close(read_end)
    os.close(write_end)


def test_pump_lines_cuts_a_long_line_between_characters_and_marks_both_sides() -> None:
    read_end, write_end = os.pipe()
    writer = OutputWriter(write_end, "stdout", capacity=1 << 20)
    seen: list[bytes] = []
    # A three-byte character across the limit: the cut goes before it.
    long_line = b"a" * (LINE_LIMIT - 1) + "€".encode() + b"tail"

    async def main() -> None:
        send, receive = trio.testing.memory_stream_one_way_pair()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(
                lambda: pump_lines(receive, writer, b"[w] ", on_line=lambda _n, _s, line: seen.append(line))
            )
            for start in range(0, len(long_line), 1000):
                await send.send_all(long_line[start : start + 1000])
            await send.send_all(b"\nnext\n")
            await send.aclose()

    trio.run(main)
    assert writer.flush(5.0)
    cut = f" [cut: line longer than {LINE_LIMIT} bytes, continued below]".encode()
    assert seen == [b"a" * (LINE_LIMIT - 1) + cut, "[continued] €tail".encode(), b"next"]
    expected = b"".join(b"[w] " + line + b"\n" for line in seen)
    assert os.read(read_end, 2 * LINE_LIMIT) == expected
    os.close(read_end)
    os.close(write_end)
