"""Waiting for Ctrl-C in the ``python -m`` entry points that start a cluster by hand."""

from __future__ import annotations

import signal
import threading

__all__ = ["interrupted", "wait_until_set"]


def interrupted() -> threading.Event:
    """An event set by SIGINT or SIGTERM; ``wait_until_set`` blocks on it."""
    stop = threading.Event()
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    return stop


def wait_until_set(stop: threading.Event) -> None:
    # Python runs a signal handler only when the main thread executes
    # bytecode; a main thread asleep in a plain wait() with other threads
    # about can miss it, so it wakes twice a second to look.
    while not stop.wait(0.5):
        pass
