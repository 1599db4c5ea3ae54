"""The deletion-deadline enforcer: requested shutdowns, destroyed on time.

The design the libvirt-provider's maintainers agreed on: the reconcile loop
only marks a domain (``requested-at`` in its metadata) and a separate routine
enforces the deadline.  A pass lists the running domains to discover
requests: at once when libvirt reports a metadata change (a request written)
or the connection comes back (changes made meanwhile sent no event), and
every ``resync_interval`` as the safety net for lost events.  Each request
found gets a watch of its own, which sends the graceful request again at
every periodic pass (a press during boot is lost) and holds a timer for
``requested-at + grace``, so the destroy comes at its due time and not at
the next pass; a request written already overdue is destroyed at once.

Work is keyed by the domain's boot -- its UUID and its ID, which libvirt
assigns anew at every start -- never by a flag: a list that was already on its
way while a destroy finished shows the destroyed boot once more, and is
recognised as such; the same guest started again is another boot, with
nothing to enforce unless its live definition carries a request again (a
new one, or the persistent definition's copy: a provider that writes with
``--live --config`` keeps it for every start until it removes it).

Only the plugin's selection (``domains``, ``exclude``, ``marker``) is acted
on.  A request on another guest, an invalid one, or one that sits in the
persistent definition only (it asks nothing of the running boot) is
reported once per boot and left alone.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import trio

from . import _domains as ops
from ._actions import FINAL, destroy
from ._binding import LibvirtFailure
from ._connection import Hypervisor
from ._domains import Domain, Key
from ._metadata import format_time
from ._settings import LibvirtSettings

__all__ = ["Enforcer"]

# A graceful destroy gives up after about 15 s, a plain one after 40 s; bound
# the whole attempt so a hung daemon cannot pin a boot "in progress" for ever.
_GRACEFUL_DESTROY_TIMEOUT = 20.0
_DESTROY_TIMEOUT = 60.0


@dataclass
class _Watch:
    """One boot's request: re-sent at every pass, destroyed at ``due``."""

    domain: Domain
    due: float  # Unix time
    found: float  # Unix time the enforcer first saw the request
    press: bool = True  # a request is to be sent (first, and at every pass)
    destroying: bool = False
    changed: trio.Event = field(default_factory=trio.Event)
    scope: trio.CancelScope = field(default_factory=trio.CancelScope)

    def update(self, domain: Domain, due: float, *, press: bool) -> None:
        """A pass found the request again (perhaps with another grace)."""
        self.domain, self.due = domain, due
        self.press = self.press or press
        self.changed.set()


class Enforcer:
    def __init__(
        self,
        hv: Hypervisor,
        settings: LibvirtSettings,
        log: logging.Logger,
        *,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.hv = hv
        self.settings = settings
        self.log = log
        self.wall_clock = wall_clock
        self.destroyed: list[str] = []  # names, for tests and the log
        self.lag: list[float] = []  # seconds from due to destroyed, per destroy
        self.destroy_took: list[float] = []  # seconds libvirt's destroy took, per destroy
        self._watches: dict[Key, _Watch] = {}
        self._done: set[Key] = set()  # boots destroyed or found off
        self._reported: set[tuple[Key, str]] = set()
        self._press_known = True  # whether this pass re-presses known requests

    async def run(self) -> None:
        """Pass after pass until cancelled (the shutdown begins)."""
        interval = self.settings.enforcer.resync_interval
        self.log.info(
            "deletion-deadline enforcer: every %.3gs, default grace %.3gs, for %s",
            interval,
            self.settings.enforcer.grace,
            self.settings.selection.describe(),
        )
        async with trio.open_nursery() as nursery:
            while True:
                # Taken before the pass: a request written during it starts the next.
                changed = self.hv.changed()
                await self.resync(nursery)
                with trio.move_on_after(interval) as timer:
                    await changed.wait()
                # A pass woken by an event (a request written, to any guest)
                # only discovers: pressing every known request again at each
                # write would flood the guests; the periodic pass re-presses.
                self._press_known = timer.cancelled_caught

    async def resync(self, nursery: trio.Nursery) -> None:
        """One pass: a watch for each new request, a press for each known one
        (on a periodic pass)."""
        try:
            domains = await self.hv.call(ops.list_domains(self.settings.selection, unselected=True))
        except LibvirtFailure as exc:
            if not exc.connection_lost:
                self.log.warning("enforcer: cannot list domains: %s", exc)
            return
        listed = {domain.key for domain in domains}
        requested: set[Key] = set()
        for domain in domains:
            due = self._due(domain)
            if due is None or domain.key in self._done:
                continue
            requested.add(domain.key)
            watch = self._watches.get(domain.key)
            if watch is None:
                watch = self._watches[domain.key] = _Watch(domain, due, self.wall_clock())
                nursery.start_soon(self._enforce, domain.key, watch)
            else:
                watch.update(domain, due, press=self._press_known)
        for key, watch in list(self._watches.items()):
            if key not in requested and not watch.destroying:
                # Off, gone, or its request was removed: nothing to enforce.
                if key in listed:
                    self.log.info("enforcer: %s: shutdown request withdrawn", watch.domain.name)
                watch.scope.cancel()
                del self._watches[key]
        # Boots no longer running never come back: forget them.
        self._done &= listed
        self._reported = {entry for entry in self._reported if entry[0] in listed}

    def _due(self, domain: Domain) -> float | None:
        """When the domain must be gone; None if its request is not for us."""
        if not domain.selected:
            if domain.request.requested_at is not None or domain.request_error or domain.definition_only:
                self._report_once(
                    domain,
                    "unselected",
                    f"shutdown request not acted on: the plugin's selection leaves this domain alone "
                    f"({self.settings.selection.describe()})",
                )
            return None
        if domain.request_error is not None:
            self._report_once(domain, "invalid", f"ignoring invalid shutdown request: {domain.request_error}")
            return None
        if domain.definition_only:
            self._report_once(
                domain,
                "definition",
                "ignoring the shutdown request in its persistent definition only (it asks nothing of the "
                "running guest; write it with --live): cancel-shutdown removes it",
            )
            return None
        return domain.request.due(self.settings.enforcer.grace)

    def _report_once(self, domain: Domain, kind: str, message: str) -> None:
        if (domain.key, kind) not in self._reported:
            self._reported.add((domain.key, kind))
            self.log.warning("enforcer: %s: %s", domain.name, message)

    async def _enforce(self, key: Key, watch: _Watch) -> None:
        """Press at every pass until due, then destroy."""
        with watch.scope:
            while (left := watch.due - self.wall_clock()) > 0:
                if watch.press:
                    watch.press = False
                    await self._request(watch.domain, left)
                    continue  # the request took time: read the clock again
                with trio.move_on_after(left):
                    await watch.changed.wait()
                watch.changed = trio.Event()
            watch.destroying = True
            if await self._destroy(watch):
                self._done.add(key)
        if self._watches.get(key) is watch:
            del self._watches[key]

    async def _request(self, domain: Domain, left: float) -> None:
        flags = ops.shutdown_flags(agent=domain.request.guest_agent)
        try:
            await self.hv.call(ops.request_shutdown(domain.uuid, flags))
        except LibvirtFailure as exc:
            if exc.code not in FINAL and not exc.connection_lost:
                self.log.warning("enforcer: %s: shutdown request failed: %s", domain.name, exc)
        else:
            self.log.info("enforcer: %s: shutdown requested, %.1fs of its grace left", domain.name, left)

    async def _destroy(self, watch: _Watch) -> bool:
        """Destroy the boot; whether it is settled (destroyed, or found off)."""
        domain, due = watch.domain, watch.due
        requested = format_time(domain.request.requested_at or 0.0)
        began = self.wall_clock()
        self.log.warning(
            "enforcer: %s: shutdown requested at %s, grace over %.2fs ago; destroying it",
            domain.name,
            requested,
            max(0.0, began - due),
        )
        try:
            with trio.move_on_after(_DESTROY_TIMEOUT) as scope:
                until = trio.current_time() + _GRACEFUL_DESTROY_TIMEOUT
                graceful_error = await destroy(self.hv, domain.uuid, graceful_until=until)
                ended = self.wall_clock()
                if graceful_error is not None:
                    self.log.warning(
                        "enforcer: %s: graceful destroy failed (%s); destroyed it plainly",
                        domain.name,
                        graceful_error,
                    )
                self.destroyed.append(domain.name)
                self.lag.append(ended - due)
                self.destroy_took.append(ended - began)
                # Two different delays: when the request became known (a
                # late discovery is the provider's or the events'), and how
                # long libvirt took to destroy.
                found = watch.found - due
                when = f"{found:.2f}s after its due time" if found > 0 else "before its due time"
                self.log.info(
                    "enforcer: %s: destroyed, %.2fs after its due time (request found %s; destroy took %.2fs)",
                    domain.name,
                    ended - due,
                    when,
                    ended - began,
                )
                return True
            if scope.cancelled_caught:
                self.log.warning("enforcer: %s: destroy did not finish in %.0fs", domain.name, _DESTROY_TIMEOUT)
        except LibvirtFailure as exc:
            if exc.code in FINAL:  # it went away on its own
                self.log.info("enforcer: %s: already off", domain.name)
                return True
            self.log.warning("enforcer: %s: destroy failed: %s", domain.name, exc)
        return False
