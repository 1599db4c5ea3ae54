"""Everything the orchestrator writes to its stdout and stderr, without ever
blocking its event loop.

A container's stdout is usually a pipe to a log collector.  When the collector
stalls, the pipe fills (64 KiB) and a plain ``write`` blocks; on the trio
thread that freezes the whole orchestrator, signals and shutdown included.
So every byte from the supervisor's side — log records and the lines of
``log_prefix`` processes — goes through an ``OutputWriter``: ``write`` only
appends to a bounded queue and returns at once, and one daemon thread per
stream does the blocking writes.  When the queue is full, whole writes (lines)
are dropped and counted; once the sink takes data again the thread says how
many were lost, so a gap in the log is never silent.

Why a thread and not ``O_NONBLOCK`` on the descriptor: the flag belongs to the
open file description, which stdout shares with every child that inherited it;
setting it would hand ``EAGAIN`` to processes that never asked for it.

A child's own stdout (no ``log_prefix``) is the inherited descriptor and never
passes through here.

``pump_lines`` copies a ``log_prefix`` child's pipe into a writer and shows
each line to an optional observer (``supervisor logs`` keeps a ring buffer of
them); observers registered with ``add_line_observer`` see every pumped line.
A line longer than ``LINE_LIMIT`` bytes is cut into lines that say so (as
s6-log does), so that a child writing without newlines costs the
supervisor a bounded amount of memory and time.
Stdlib only at import time: trio is needed only by ``pump_lines`` callers.
"""

from __future__ import annotations

import collections
import contextlib
import io
import os
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import trio
    from _typeshed import ReadableBuffer

__all__ = [
    "LINE_LIMIT",
    "LineObserver",
    "OutputWriter",
    "add_line_observer",
    "flush_all",
    "install_std_streams",
    "notify_line",
    "pump_lines",
    "remove_line_observer",
    "stderr_writer",
    "stdout_writer",
]

LineObserver = Callable[[str, str, bytes], None]
"""``on_line(process_name, stream, line)``: ``stream`` is ``"stdout"`` or
``"stderr"``, ``line`` the line's bytes without prefix and newline.  Called on
the trio thread for every line; it must not block."""

# What may wait for a stuck sink: enough for a burst of log lines or a few
# screens of a child's output, small enough to be no memory concern.
_DEFAULT_CAPACITY = 256 * 1024
# Longer lines of a log_prefix process are cut: the container runtime splits
# log lines at 16 KiB too, so a longer one is no single record anyway.
LINE_LIMIT = 16 * 1024
_CUT = b" [cut: line longer than %d bytes, continued below]" % LINE_LIMIT
_CONTINUED = b"[continued] "
# How long the exit waits for queued output before giving up on the sink.
_EXIT_FLUSH_SECONDS = 0.5


def _plain_notice(dropped: int, stream: str) -> bytes:
    return f"supervisor: {dropped} line(s) of output dropped: {stream} was not being read\n".encode()


class OutputWriter:
    """A non-blocking, bounded writer for one descriptor (see the module doc)."""

    def __init__(
        self,
        fd: int,
        name: str,
        *,
        capacity: int = _DEFAULT_CAPACITY,
        notice: Callable[[int, str], bytes] = _plain_notice,
    ) -> None:
        self.fd = fd
        self.name = name
        self.capacity = capacity
        # Formats the "N lines dropped" line; the logging set-up swaps in
        # one that matches the log format (text or JSON).
        self.notice = notice
        self._queue: collections.deque[bytes] = collections.deque()
        self._queued = 0
        self._dropped_since_notice = 0
        self.dropped = 0
        """Lines dropped so far, in total."""
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._idle = threading.Condition(self._lock)
        self._busy = False
        self._thread: threading.Thread | None = None
        self._broken = False

    def write(self, data: bytes) -> bool:
        """Queue ``data`` (one or more whole lines) for the sink; never blocks.
        Returns False if it was dropped because the queue is full."""
        if not data:
            return True
        with self._lock:
            if self._broken:
                return False
            if self._queued + len(data) > self.capacity:
                lines = max(1, data.count(b"\n"))
                self._dropped_since_notice += lines
                self.dropped += lines
                return False
            self._queue.append(data)
            self._queued += len(data)
            if self._thread is None:
                self._thread = threading.Thread(target=self._drain, name=f"supervisor-{self.name}", daemon=True)
                self._thread.start()
            self._wake.notify()
        return True

    @property
    def pending(self) -> int:
        """Bytes waiting for the sink."""
        return self._queued

    def flush(self, timeout: float = _EXIT_FLUSH_SECONDS) -> bool:
        """Wait up to ``timeout`` seconds for the queue to drain (at exit:
        a stuck sink must not hold the supervisor).  True if it drained."""
        end = time.monotonic() + timeout
        with self._lock:
            while (self._queue or self._busy) and not self._broken:
                left = end - time.monotonic()
                if left <= 0:
                    return False
                self._idle.wait(left)
        return True

    def _drain(self) -> None:
        while True:
            with self._lock:
                while not self._queue:
                    self._busy = False
                    self._idle.notify_all()
                    self._wake.wait()
                self._busy = True
                chunk = b"".join(self._queue)
                self._queue.clear()
                self._queued = 0
            if not self._write_all(chunk):
                return
            with self._lock:
                dropped, self._dropped_since_notice = self._dropped_since_notice, 0
            if dropped and not self._write_all(self.notice(dropped, self.name)):
                return

    def _write_all(self, data: bytes) -> bool:
        view = memoryview(data)
        while view:
            try:
                view = view[os.write(self.fd, view) :]
            except InterruptedError:
                continue
            except OSError:
                # A closed or broken sink: nothing will ever get through;
                # drop everything from now on instead of retrying.
                with self._lock:
                    self._broken = True
                    self._queue.clear()
                    self._queued = 0
                    self._busy = False
                    self._idle.notify_all()
                return False
        return True


_writers: dict[int, OutputWriter] = {}


def _writer(fd: int, name: str) -> OutputWriter:
    writer = _writers.get(fd)
    if writer is None:
        writer = _writers[fd] = OutputWriter(fd, name)
    return writer


def stdout_writer() -> OutputWriter:
    """The process-wide writer for descriptor 1."""
    return _writer(1, "stdout")


def stderr_writer() -> OutputWriter:
    """The process-wide writer for descriptor 2."""
    return _writer(2, "stderr")


class _WriterIO(io.RawIOBase):
    """A raw stream over a writer, so ``print`` and tracebacks go through it too."""

    def __init__(self, writer: OutputWriter) -> None:
        super().__init__()
        self._writer = writer

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self._writer.fd

    def isatty(self) -> bool:
        try:
            return os.isatty(self._writer.fd)
        except OSError:
            return False

    def write(self, data: ReadableBuffer) -> int:
        chunk = bytes(data)
        self._writer.write(chunk)
        return len(chunk)


def install_std_streams() -> None:
    """Point ``sys.stdout`` and ``sys.stderr`` at the writers: a plugin's
    ``print`` must not be the one write that blocks the event loop."""
    import sys

    for attr, writer in (("stdout", stdout_writer()), ("stderr", stderr_writer())):
        old = getattr(sys, attr)
        with contextlib.suppress(Exception):
            old.flush()
        stream = io.TextIOWrapper(
            io.BufferedWriter(_WriterIO(writer)),
            encoding=getattr(old, "encoding", None) or "utf-8",
            errors="backslashreplace",
            line_buffering=True,
            write_through=False,
        )
        setattr(sys, attr, stream)


def flush_all(timeout: float = _EXIT_FLUSH_SECONDS) -> None:
    """At exit: give queued output ``timeout`` seconds in all, then go."""
    import sys

    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    end = time.monotonic() + timeout
    for writer in list(_writers.values()):
        writer.flush(max(0.0, end - time.monotonic()))


# -- the lines of log_prefix processes -------------------------------------------

_observers: list[LineObserver] = []


def add_line_observer(observer: LineObserver) -> None:
    """See every line pumped from now on (all processes, both streams)."""
    _observers.append(observer)


def remove_line_observer(observer: LineObserver) -> None:
    with contextlib.suppress(ValueError):
        _observers.remove(observer)


def notify_line(process_name: str, stream: str, line: bytes) -> None:
    """Show one line to every registered observer.  An observer's bug costs
    it the line, never the pump."""
    for observer in tuple(_observers):
        with contextlib.suppress(Exception):
            observer(process_name, stream, line)


async def pump_lines(
    source: trio.abc.ReceiveStream,
    writer: OutputWriter,
    prefix: bytes,
    *,
    process_name: str = "",
    stream: str = "stdout",
    on_line: LineObserver | None = None,
) -> None:
    """Copy a child's output line by line with ``prefix`` into ``writer``
    (``log_prefix``), and show each line to ``on_line``.  A last line without
    a newline is completed when the pipe closes; a line longer than
    ``LINE_LIMIT`` is written in pieces, each marked where it was cut."""
    pending = b""
    continued = False  # whether ``pending`` continues a cut line

    def emit(lines: list[bytes]) -> None:
        writer.write(b"".join(prefix + line + b"\n" for line in lines))
        if on_line is not None:
            for line in lines:
                on_line(process_name, stream, line)

    async for chunk in source:
        pending += chunk
        *complete, pending = pending.split(b"\n")
        lines: list[bytes] = []
        for line in complete:
            pieces, rest = _cut(line, continued)
            lines += pieces
            lines.append((_CONTINUED if continued or pieces else b"") + rest)
            continued = False
        if len(pending) > LINE_LIMIT:
            pieces, pending = _cut(pending, continued)
            lines += pieces
            continued = True
        if lines:
            emit(lines)
    if pending or continued:
        emit([(_CONTINUED if continued else b"") + pending])


def _cut(line: bytes, continued: bool) -> tuple[list[bytes], bytes]:
    """The whole pieces of ``line``, at most ``LINE_LIMIT`` bytes each and
    marked as cut (and as continued, all but the first unless ``line``
    continues a cut one), and the rest, unmarked."""
    pieces = []
    while len(line) > LINE_LIMIT:
        cut = _cut_point(line)
        pieces.append((_CONTINUED if continued else b"") + line[:cut] + _CUT)
        line, continued = line[cut:], True
    return pieces, line


def _cut_point(data: bytes) -> int:
    """Where to cut ``data`` near ``LINE_LIMIT``: not inside a UTF-8
    character (continuation bytes are 0b10xxxxxx)."""
    for back in range(4):
        if data[LINE_LIMIT - back] & 0xC0 != 0x80:
            return LINE_LIMIT - back
    return LINE_LIMIT  # not UTF-8 anyway
