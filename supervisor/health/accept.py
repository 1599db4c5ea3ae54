"""Accepting connections without being taken down by them: the loop the
control socket and the probe listener share.

``trio.serve_listeners`` logs a traceback for every ``accept`` that fails
for want of descriptors (EMFILE and the like) and tries again 100 ms
later; a flood of connections then fills the log while it lasts.  Here
such a failure asks the caller to free a descriptor (``free_one``: the
probe listener closes its oldest connection), and is logged as one
warning a minute, with the count.
"""

from __future__ import annotations

import errno
import logging
import os
import socket
import time
from collections.abc import AsyncIterator, Callable

import trio

__all__ = ["accept_connections"]

# accept() errors that mean "no resources right now", not a broken socket.
_CAPACITY_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS})
_WARN_EVERY = 60.0  # seconds between warnings
_RETRY = 0.1  # seconds to wait when nothing could be freed
_BATCH = 64  # connections accepted before the other tasks get a turn


async def accept_connections(
    listener: trio.SocketListener, *, what: str, log: logging.Logger, free_one: Callable[[], bool]
) -> AsyncIterator[trio.SocketStream]:
    """Every connection ``listener`` accepts, until cancelled; ``what``
    names the listener in the warning.

    Whatever is waiting is accepted in one go (up to ``_BATCH``), not one
    connection per turn of the event loop: a probe that arrives behind a
    crowd waits in the kernel's accept queue only as long as the accept
    calls take."""
    failures = 0
    warned_at: float | None = None
    # The listening socket as a plain one (the same open file, non-blocking
    # as trio made it), for accept calls that do not each yield.
    plain = socket.socket(fileno=os.dup(listener.socket.fileno()))
    async with listener:
        with plain:
            while True:
                await trio.lowlevel.wait_readable(plain)
                for _ in range(_BATCH):
                    try:
                        accepted, _address = plain.accept()
                    except (BlockingIOError, InterruptedError, ConnectionAbortedError):
                        break
                    except OSError as exc:
                        if exc.errno not in _CAPACITY_ERRNOS:
                            raise
                        failures += 1
                        now = time.monotonic()
                        if warned_at is None or now - warned_at >= _WARN_EVERY:
                            log.warning(
                                "%s: accept failed %d time(s): %s; closing the oldest connections",
                                what,
                                failures,
                                exc.strerror or exc,
                            )
                            warned_at, failures = now, 0
                        if not free_one():
                            await trio.sleep(_RETRY)
                        break
                    accepted.setblocking(False)
                    yield trio.SocketStream(trio.socket.from_stdlib_socket(accepted))
