"""libvirt's event loop in a thread of its own, handing events to trio.

libvirt delivers lifecycle events and connection-close notices only while
something runs ``virEventRunDefaultImpl()``.  That call blocks, so it gets a
daemon thread, started once per process (the default implementation can be
registered only once, and only before the first connection that wants
events).  Callbacks run on that thread and must not block: they only hand
the event to trio with ``TrioToken.run_sync_soon``.
"""

from __future__ import annotations

import logging
import threading

from ._binding import libvirt_module

__all__ = ["ensure_event_loop"]

log = logging.getLogger("supervisor.plugin.libvirt")

_lock = threading.Lock()
_thread: threading.Thread | None = None


def ensure_event_loop() -> None:
    """Register libvirt's default event implementation and run it, once."""
    global _thread
    with _lock:
        if _thread is not None:
            return
        libvirt = libvirt_module()
        libvirt.virEventRegisterDefaultImpl()
        _thread = threading.Thread(target=_run, name="libvirt-events", daemon=True)
        _thread.start()


def _run() -> None:
    libvirt = libvirt_module()
    while True:
        try:
            libvirt.virEventRunDefaultImpl()
        except Exception as exc:  # keep the loop alive: a dead loop means no events at all
            log.warning("libvirt event loop: %s", exc)
