"""The deletion-deadline enforcer: a periodic pass over requested shutdowns.

The design the libvirt-provider's maintainers agreed on: the reconcile loop
only marks a domain (``requested-at`` in its metadata) and a separate routine
enforces the deadline.  Every ``resync_interval`` this lists the running
domains; one whose request is still within ``requested-at + grace`` gets the
graceful request again (a press during boot is lost), one past it is
destroyed.  Domains are handled concurrently, and one still being handled
from an earlier pass is skipped, so a slow destroy delays nobody else.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import trio

from . import _domains as ops
from ._actions import FINAL, destroy
from ._binding import LibvirtFailure
from ._connection import Hypervisor
from ._domains import Domain
from ._metadata import format_time
from ._settings import LibvirtSettings

__all__ = ["Enforcer"]

# A graceful destroy gives up after about 15 s, a plain one after 40 s; bound
# the whole attempt so a hung daemon cannot pin a domain "in progress" for ever.
_GRACEFUL_DESTROY_TIMEOUT = 20.0
_DESTROY_TIMEOUT = 60.0


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
        self.busy: set[str] = set()
        self.destroyed: list[str] = []  # names, for tests and the log
        self._reported_bad: set[str] = set()

    async def run(self) -> None:
        """Pass after pass until cancelled (the shutdown begins)."""
        interval = self.settings.enforcer.resync_interval
        self.log.info(
            "deletion-deadline enforcer: every %.3gs, default grace %.3gs",
            interval,
            self.settings.enforcer.grace,
        )
        async with trio.open_nursery() as nursery:
            while True:
                await self.resync(nursery)
                await trio.sleep(interval)

    async def resync(self, nursery: trio.Nursery) -> None:
        """One pass: start a task for each domain whose request needs action."""
        try:
            domains = await self.hv.call(ops.list_domains())
        except LibvirtFailure as exc:
            if not exc.connection_lost:
                self.log.warning("enforcer: cannot list domains: %s", exc)
            return
        now = self.wall_clock()
        for domain in domains:
            if domain.request_error is not None:
                if domain.uuid not in self._reported_bad:
                    self.log.warning(
                        "enforcer: %s: ignoring invalid shutdown request: %s",
                        domain.name,
                        domain.request_error,
                    )
                    self._reported_bad.add(domain.uuid)
                continue
            due = domain.request.due(self.settings.enforcer.grace)
            if due is None or domain.uuid in self.busy:
                continue
            self.busy.add(domain.uuid)
            if now < due:
                nursery.start_soon(self._request, domain, due - now)
            else:
                nursery.start_soon(self._destroy, domain, now - due)

    async def _request(self, domain: Domain, left: float) -> None:
        flags = ops.shutdown_flags(agent=domain.request.guest_agent)
        try:
            await self.hv.call(ops.request_shutdown(domain.uuid, flags))
        except LibvirtFailure as exc:
            if exc.code not in FINAL and not exc.connection_lost:
                self.log.warning("enforcer: %s: shutdown request failed: %s", domain.name, exc)
        else:
            self.log.info("enforcer: %s: shutdown requested, %.1fs of its grace left", domain.name, left)
        finally:
            self.busy.discard(domain.uuid)

    async def _destroy(self, domain: Domain, overdue: float) -> None:
        requested = format_time(domain.request.requested_at or 0.0)
        self.log.warning(
            "enforcer: %s: shutdown requested at %s, grace over %.1fs ago; destroying it",
            domain.name,
            requested,
            overdue,
        )
        try:
            with trio.move_on_after(_DESTROY_TIMEOUT) as scope:
                until = trio.current_time() + _GRACEFUL_DESTROY_TIMEOUT
                graceful_error = await destroy(self.hv, domain.uuid, graceful_until=until)
                if graceful_error is not None:
                    self.log.warning(
                        "enforcer: %s: graceful destroy failed (%s); destroyed it plainly",
                        domain.name,
                        graceful_error,
                    )
                self.destroyed.append(domain.name)
                self.log.info("enforcer: %s: destroyed", domain.name)
            if scope.cancelled_caught:
                self.log.warning("enforcer: %s: destroy did not finish in %.0fs", domain.name, _DESTROY_TIMEOUT)
        except LibvirtFailure as exc:
            if exc.code not in FINAL:  # FINAL: it went away on its own
                self.log.warning("enforcer: %s: destroy failed: %s", domain.name, exc)
        finally:
            self.busy.discard(domain.uuid)
