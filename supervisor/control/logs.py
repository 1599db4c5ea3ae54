"""Recent output lines per process, for ``supervisor logs``.

A ring per process: at most ``limit`` lines, each cut at ``LINE_LIMIT``
bytes, and at most ``RING_BYTES`` of memory in all (a line's text costs up
to four bytes a character: one emoji makes Python store the whole line
so), so a chatty or binary-spewing process costs a bounded amount of
memory however long the pod runs.  Lines arrive from the output pumps
(``supervisor.runtime.output``'s observer) on the trio thread; followers
(``logs -f``) get each new line through a callback that must not block.
"""

from __future__ import annotations

import collections
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["LINE_LIMIT", "RING_BYTES", "LogLine", "LogRing"]

# Longer lines are cut (and marked): a ring holds lines, not megabyte blobs.
LINE_LIMIT = 8192
_CUT = " …[cut]"
# Memory for one process's lines: the last 1000 lines of 2 KiB, or fewer longer ones.
RING_BYTES = 2 << 20


@dataclass(frozen=True, slots=True)
class LogLine:
    process: str
    stream: str
    time: float  # wall clock, for people and for `kubectl logs` to match up
    text: str

    def as_dict(self) -> dict[str, object]:
        return {"process": self.process, "stream": self.stream, "time": round(self.time, 3), "line": self.text}


Follower = Callable[[LogLine], None]


class LogRing:
    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._rings: dict[str, collections.deque[LogLine]] = {}
        self._bytes: dict[str, int] = {}  # memory held by each ring's texts
        self._followers: list[Follower] = []
        self.seen = 0  # lines observed in total

    def observe(self, process: str, stream: str, line: bytes) -> None:
        """The output pump's observer (``LineObserver``)."""
        self.seen += 1
        if len(line) > LINE_LIMIT:
            text = line[:LINE_LIMIT].decode(errors="replace") + _CUT
        else:
            text = line.decode(errors="replace")
        entry = LogLine(process, stream, time.time(), text.rstrip("\r"))
        if self.limit:
            ring = self._rings.get(process)
            if ring is None:
                ring = self._rings[process] = collections.deque()
            ring.append(entry)
            held = self._bytes.get(process, 0) + sys.getsizeof(entry.text)
            while len(ring) > self.limit or held > RING_BYTES:
                held -= sys.getsizeof(ring.popleft().text)
            self._bytes[process] = held
        for follower in tuple(self._followers):
            follower(entry)

    def recent(self, process: str | None, count: int, *, since: float | None = None) -> list[LogLine]:
        """The last ``count`` lines of one process, or of all of them in the
        order they arrived; with ``since`` (epoch seconds), of those from then on."""
        if count <= 0:
            return []
        if process is not None:
            lines = list(self._rings.get(process, ()))
        else:
            lines = sorted((line for ring in self._rings.values() for line in ring), key=lambda line: line.time)
        if since is not None:
            lines = [line for line in lines if line.time >= since]
        return lines[-count:]

    def follow(self, follower: Follower) -> Callable[[], None]:
        """Call ``follower`` for every new line; returns the function that stops it."""
        self._followers.append(follower)

        def stop() -> None:
            if follower in self._followers:
                self._followers.remove(follower)

        return stop
