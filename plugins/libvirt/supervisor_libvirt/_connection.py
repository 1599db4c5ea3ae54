"""One libvirt connection, shared by every task: threads, events, reconnects.

Every libvirt call blocks, so each runs in a worker thread
(``trio.to_thread.run_sync(..., abandon_on_cancel=True)``): a deadline or a
second SIGTERM cancels the waiting task at once even if libvirtd hangs, and
the thread finishes on its own.  When libvirtd stops or restarts, the next
call reconnects (at most once per ``retry_interval``), so a restarted daemon
is picked up again within the same shutdown.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import trio

from ._binding import LibvirtFailure, failure, libvirt_module
from ._events import ensure_event_loop

__all__ = ["Hypervisor"]

T = TypeVar("T")

# virDomainEventID / virDomainEventType values.
_EVENT_ID_LIFECYCLE = 0
_EVENT_ID_REBOOT = 1
_EVENT_ID_METADATA_CHANGE = 23
_EVENT_UNDEFINED = 1
_EVENT_STOPPED = 5
_CLOSE_TIMEOUT = 2.0
_CLOSE_REASONS = {0: "error", 1: "end of file", 2: "keepalive timeout", 3: "closed by client"}


class Hypervisor:
    """A reconnecting libvirt connection with lifecycle events.

    ``call(op)`` runs ``op(conn)`` in a worker thread and raises
    LibvirtFailure; ``stopped(uuid)`` is a trio.Event set when libvirt reports
    that domain stopped (or undefined); ``changed()`` one set at the next
    metadata change of any domain or reconnect (what may have been written
    while the connection was down); ``rebooted(uuid)`` counts the guest
    reboots libvirt reported.  Events only wake the waiters early: callers
    still confirm by asking libvirt, since events are lost while the
    connection is down.

    ``close_by()`` (if given) is the latest moment ``aclose`` may wait for the
    connection to close: a close can block behind calls still in flight
    (libvirt holds the connection's lock for them), and a shutdown hook must
    fit its deadline; past that moment the close finishes in its own thread.
    """

    def __init__(
        self,
        uri: str,
        log: logging.Logger,
        *,
        threads: int = 16,
        retry_interval: float = 1.0,
        keepalive: tuple[int, int] = (5, 3),
        close_by: Callable[[], float] | None = None,
    ) -> None:
        self.uri = uri
        self.log = log
        self.retry_interval = retry_interval
        self.keepalive = keepalive
        self.limiter = trio.CapacityLimiter(threads)
        self._conn: Any = None
        # Counts connections, so that a late notice about an old one is ignored.
        self._generation = 0
        self._callback_ids: tuple[int, ...] = ()
        self._connect_lock = trio.Lock()
        self._last_failure: tuple[float, LibvirtFailure] | None = None
        self._lost_reported = False
        self._stopped: dict[str, trio.Event] = {}
        self._stop_reasons: dict[str, int] = {}
        self._token: trio.lowlevel.TrioToken | None = None
        self._changed = trio.Event()
        self._reboots: dict[str, int] = {}
        self.close_by = close_by

    async def __aenter__(self) -> Hypervisor:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    # ------------------------------------------------------------------

    async def call(self, op: Callable[[Any], T]) -> T:
        """Run ``op(conn)`` in a worker thread; reconnect first if needed."""
        conn = await self._connection()
        generation = self._generation
        libvirt = libvirt_module()

        def run() -> T:
            try:
                return op(conn)
            except libvirt.libvirtError as exc:
                alive = False
                with contextlib.suppress(libvirt.libvirtError):
                    alive = bool(conn.isAlive())
                raise failure(exc, connection_lost=not alive) from None

        try:
            return await trio.to_thread.run_sync(run, abandon_on_cancel=True, limiter=self.limiter)
        except LibvirtFailure as exc:
            if exc.connection_lost:
                self._lost(generation, str(exc))
            raise

    def stopped(self, uuid: str) -> trio.Event:
        """An event set once libvirt reports that the domain stopped; from
        the first call on, the stop's reason is kept for ``stop_reason``."""
        event = self._stopped.get(uuid)
        if event is None:
            event = self._stopped[uuid] = trio.Event()
        return event

    def stop_reason(self, uuid: str) -> int | None:
        """The shutoff reason (VIR_DOMAIN_SHUTOFF_*) of the last reported stop
        of a domain watched with ``stopped``: what is left to know of a
        transient domain, which vanishes once off."""
        return self._stop_reasons.get(uuid)

    def forget(self, uuid: str) -> None:
        self._stopped.pop(uuid, None)
        self._stop_reasons.pop(uuid, None)
        self._reboots.pop(uuid, None)

    def changed(self) -> trio.Event:
        """An event set at the next metadata change of any domain (a shutdown
        request written), and at a reconnect (changes made meanwhile sent no
        event): the moment to look at the domains again."""
        return self._changed

    def rebooted(self, uuid: str) -> int:
        """How many times libvirt reported that the guest rebooted."""
        return self._reboots.get(uuid, 0)

    def soon(self, function: Callable[..., object], *args: object) -> None:
        """Run ``function(*args)`` in trio's thread, from any thread (a worker
        thread that its caller abandoned, say); dropped once trio has ended."""
        token = self._token
        if token is None:
            return
        with contextlib.suppress(trio.RunFinishedError):
            token.run_sync_soon(function, *args)

    async def aclose(self) -> None:
        """Close the connection; shielded but bounded (``_CLOSE_TIMEOUT`` and
        ``close_by()``), so that a cancelled hook still releases it and
        neither a hung daemon nor calls still in flight hold the hook: past
        the bound the close goes on in its own thread."""
        conn, self._conn = self._conn, None
        callback_ids, self._callback_ids = self._callback_ids, ()
        if conn is None:
            return
        until = trio.current_time() + _CLOSE_TIMEOUT
        if self.close_by is not None:
            until = min(until, self.close_by())
        done = trio.Event()
        self._token = trio.lowlevel.current_trio_token()

        def close() -> None:
            self._close(conn, callback_ids)
            self.soon(done.set)

        threading.Thread(target=close, name="libvirt-close", daemon=True).start()
        with trio.CancelScope(shield=True), trio.move_on_at(until):
            await done.wait()

    # ------------------------------------------------------------------

    async def wait_until_up(self) -> None:
        """Until libvirtd answers (a daemon just spawned), without reporting
        the refusals on the way; the caller bounds it."""
        while True:
            try:
                await self._connection(report=False)
            except LibvirtFailure:
                await trio.sleep(self.retry_interval)
            else:
                return

    async def _connection(self, *, report: bool = True) -> Any:
        async with self._connect_lock:
            if self._conn is not None:
                return self._conn
            now = trio.current_time()
            if self._last_failure is not None and now - self._last_failure[0] < self.retry_interval:
                raise self._last_failure[1]
            self._token = trio.lowlevel.current_trio_token()
            generation = self._generation + 1
            try:
                conn, callback_ids = await trio.to_thread.run_sync(
                    self._open, generation, abandon_on_cancel=True, limiter=self.limiter
                )
            except LibvirtFailure as exc:
                self._last_failure = (trio.current_time(), exc)
                if report and not self._lost_reported:
                    self.log.warning("cannot connect to %s: %s", self.uri, exc)
                    self._lost_reported = True
                raise
            if self._lost_reported:
                # The loss was the warning; its end is news, not a problem.
                self.log.info("reconnected to %s", self.uri)
                self._set_changed()
            self._lost_reported = False
            self._last_failure = None
            self._conn, self._callback_ids, self._generation = conn, callback_ids, generation
            return conn

    def _open(self, generation: int) -> tuple[Any, tuple[int, ...]]:
        libvirt = libvirt_module()
        ensure_event_loop()
        try:
            conn = libvirt.open(self.uri)
        except libvirt.libvirtError as exc:
            raise failure(exc, connection_lost=True) from None
        if conn is None:  # old bindings return None instead of raising
            raise LibvirtFailure(f"cannot connect to {self.uri}", connection_lost=True)
        # Local drivers (test:///) have no keepalive; nothing to detect there.
        with contextlib.suppress(libvirt.libvirtError):
            conn.setKeepAlive(*self.keepalive)
        callback_ids: list[int] = []
        try:
            for event_id, callback in (
                (_EVENT_ID_LIFECYCLE, self._on_lifecycle),
                (_EVENT_ID_REBOOT, self._on_reboot),
                (_EVENT_ID_METADATA_CHANGE, self._on_metadata_change),
            ):
                callback_ids.append(conn.domainEventRegisterAny(None, event_id, callback, None))
            conn.registerCloseCallback(self._on_close, generation)
        except libvirt.libvirtError as exc:
            self.log.info("no domain events from %s, polling only: %s", self.uri, exc)
        return conn, tuple(callback_ids)

    @staticmethod
    def _close(conn: Any, callback_ids: tuple[int, ...]) -> None:
        libvirt = libvirt_module()
        try:
            for callback_id in callback_ids:
                conn.domainEventDeregisterAny(callback_id)
            conn.unregisterCloseCallback()
        except libvirt.libvirtError:
            pass
        with contextlib.suppress(libvirt.libvirtError):
            conn.close()

    def _lost(self, generation: int, reason: str) -> None:
        """Forget a dead connection (in trio's thread); wake every waiter so
        that it polls, fails and retries through a new connection."""
        if generation != self._generation or self._conn is None:
            return
        conn, self._conn = self._conn, None
        # Closing releases the client's socket and callbacks; in a thread of
        # its own because even that may block on a hung daemon.
        threading.Thread(target=self._close, args=(conn, self._callback_ids), name="libvirt-close", daemon=True).start()
        self._callback_ids = ()
        if not self._lost_reported:
            self.log.warning("lost the connection to %s: %s; reconnecting", self.uri, reason)
            self._lost_reported = True
        for event in self._stopped.values():
            event.set()
        self._stopped.clear()

    # Callbacks on libvirt's event thread: hand over to trio, never block.

    def _on_lifecycle(self, _conn: Any, dom: Any, event: int, detail: int, _opaque: object) -> None:
        if event == _EVENT_STOPPED:
            # virDomainEventStoppedDetailType counts from SHUTDOWN = 0, the
            # shutoff reasons from UNKNOWN = 0: one apart, in the same order.
            self.soon(self._set_stopped, dom.UUIDString(), detail + 1)
        elif event == _EVENT_UNDEFINED:
            self.soon(self._set_stopped, dom.UUIDString(), None)

    def _on_reboot(self, _conn: Any, dom: Any, _opaque: object) -> None:
        self.soon(self._count_reboot, dom.UUIDString())

    def _on_metadata_change(self, _conn: Any, _dom: Any, _type: int, _nsuri: str | None, _opaque: object) -> None:
        self.soon(self._set_changed)

    def _on_close(self, _conn: Any, reason: int, generation: int) -> None:
        self.soon(self._lost, generation, f"connection closed ({_CLOSE_REASONS.get(reason, reason)})")

    def _set_stopped(self, uuid: str, reason: int | None) -> None:
        event = self._stopped.get(uuid)
        if event is not None:
            if reason is not None:
                self._stop_reasons[uuid] = reason
            event.set()

    def _count_reboot(self, uuid: str) -> None:
        self._reboots[uuid] = self._reboots.get(uuid, 0) + 1

    def _set_changed(self) -> None:
        self._changed.set()
        self._changed = trio.Event()
