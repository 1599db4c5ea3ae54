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

The pipe's read end raises ``STATUS_SIGNAL`` in the init layer on every
write (``F_SETSIG``), so the init layer, which sleeps in ``sigtimedwait``,
hears each line at once.  Stdlib only: both processes use it before trio.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time

__all__ = [
    "SECOND_SIGNAL_SLICE",
    "STATUS_SIGNAL",
    "WALL_EXIT_CODE",
    "StatusPipe",
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

# The orchestrator escalates to SIGKILL this much before the wall, so that in
# the ordinary case it finishes (kills, reaps, logs the timeline, exits: about
# 5 ms on an idle machine) before PID 1 has to step in: 1 % of the grace
# period, at most 50 ms — a stop_timeout-free process is killed that much
# early, which keeps the escalation within 50 ms of the grace period.
_MARGIN_FRACTION = 0.01
_MARGIN_MAX = 0.05


def wall_margin(grace_period: float) -> float:
    """How long before the wall the orchestrator's own escalation comes."""
    return min(_MARGIN_MAX, grace_period * _MARGIN_FRACTION)


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
