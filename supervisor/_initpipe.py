"""What the orchestrator tells the init layer, and the wall's fixed numbers.

The init layer (PID 1) owns the shutdown deadline: it must know the absolute
kill time as soon as a shutdown begins, not when the orchestrator is done —
a stalled orchestrator never gets that far.  So the orchestrator reports on a
pipe, one line per fact, as it happens:

``log FORMAT LEVEL``
    the log settings from the configuration;
``grace SECONDS``
    the configured grace period, as soon as the configuration is read (until
    then the init layer uses the command line's ``--grace-period`` or 30 s);
``wall MONOTONIC``
    a shutdown began, or its deadline moved (``shorten()``/``expire()``): the
    wall is at this ``time.monotonic()`` value (one clock for both
    processes);
``phase TEXT``
    the shutdown timeline's current step, for the wall's log line.

One fact goes the other way: when the init layer received the stop signal
that started its wall (`StopSignalTime`), so that both processes count the
grace period from the same moment.

The pipe's read end raises ``STATUS_SIGNAL`` in the init layer on every
write (``F_SETSIG``), so the init layer, which sleeps in ``sigtimedwait``,
hears each line at once.  Stdlib only: both processes use it before trio.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import signal
import time

__all__ = [
    "SECOND_SIGNAL_SLICE",
    "STATUS_SIGNAL",
    "WALL_EXIT_CODE",
    "StatusPipe",
    "StopSignalTime",
    "wall_margin",
]

# A write to the status pipe wakes the init layer with this real-time signal
# (PIPE_RELAY is SIGRTMIN+1).
STATUS_SIGNAL = int(signal.SIGRTMIN) + 2

# After a second SIGTERM/SIGINT the orchestrator has this long (or less, if the
# wall is sooner) to escalate and exit on its own; then the init layer kills
# everything itself.  One second: plenty for a loop that is not stuck to
# SIGKILL its processes and log the timeline; short enough that a user who
# pressed Ctrl-C twice is not kept waiting.
SECOND_SIGNAL_SLICE = 1.0

# The init layer's exit status when it had to end the shutdown at the wall:
# 128 + SIGKILL, what the main process (killed with everything else) reports.
WALL_EXIT_CODE = 128 + int(signal.SIGKILL)

# The orchestrator escalates to SIGKILL this much before the wall, so that it
# can finish on its own (kill, reap, log the timeline, exit) before PID 1 has
# to step in: 5 % of the grace period, at most 250 ms.  On an idle machine
# that takes about 5 ms, but on a loaded one the orchestrator waits for a
# core between each of those steps: with 1 % (20 ms of a 2 s grace period)
# the wall often came first at a load of 17 on 2 cores, and the user lost
# the timeline.  The cost is that a process without a stop_timeout is
# killed up to 250 ms before the grace period ends, which the kubelet's own
# SIGKILL at the grace period would not have spared it anyway.
_MARGIN_FRACTION = 0.05
_MARGIN_MAX = 0.25


def wall_margin(grace_period: float) -> float:
    """How long before the wall the orchestrator's own escalation comes."""
    return min(_MARGIN_MAX, grace_period * _MARGIN_FRACTION)


class StopSignalTime:
    """When the init layer received the first stop signal, on
    ``time.monotonic()``: written by the init layer before it passes the
    signal on, read by the orchestrator when the signal reaches it.

    Both count the grace period from that one moment.  Counted from when the
    forwarded signal reached the orchestrator instead, its escalation came
    the forwarding delay later than the wall; on a loaded machine that delay
    (the orchestrator waiting for a core) exceeded the margin, PID 1 killed
    first and the timeline was lost.  A shared anonymous page, mapped before
    the fork, needs neither process to read anything at the time, and
    ``kill()`` orders the write before the orchestrator's read.
    """

    _shared: StopSignalTime | None = None

    def __init__(self) -> None:
        self._page = mmap.mmap(-1, 8)  # MAP_SHARED | MAP_ANONYMOUS: survives fork()

    @classmethod
    def share(cls) -> StopSignalTime:
        """The init layer's, made before it forks the orchestrator, which
        then finds the same page with `shared`."""
        cls._shared = cls()
        return cls._shared

    @classmethod
    def shared(cls) -> StopSignalTime | None:
        return cls._shared

    def record(self, monotonic: float) -> None:
        self._page[:8] = round(monotonic * 1e9).to_bytes(8, "little")

    def read(self) -> float | None:
        nanoseconds = int.from_bytes(self._page[:8], "little")
        return nanoseconds / 1e9 if nanoseconds else None


class StatusPipe:
    """The orchestrator's end.  Writes never block (the pipe is non-blocking
    and the init layer reads it on every wake-up); a lost line only costs the
    init layer a detail, never the wall, which it computes itself too."""

    def __init__(self, fd: int | None) -> None:
        self.fd = fd
        if fd is not None:
            with contextlib.suppress(OSError):
                os.set_blocking(fd, False)

    def send(self, line: str) -> None:
        if self.fd is not None:
            with contextlib.suppress(OSError):
                os.write(self.fd, (line.replace("\n", " ") + "\n").encode(errors="replace"))

    def grace(self, seconds: float) -> None:
        self.send(f"grace {seconds:.6f}")

    def wall_in(self, seconds: float) -> None:
        """The wall is ``seconds`` from now."""
        self.send(f"wall {time.monotonic() + max(0.0, seconds):.6f}")

    def phase(self, text: str) -> None:
        self.send(f"phase {text}")

    def stop_signal_since(self) -> float:
        """How long ago the init layer received the first stop signal; 0
        when it has not (or there is no init layer: no pipe)."""
        shared = StopSignalTime.shared()
        received = shared.read() if self.fd is not None and shared is not None else None
        return 0.0 if received is None else max(0.0, time.monotonic() - received)
