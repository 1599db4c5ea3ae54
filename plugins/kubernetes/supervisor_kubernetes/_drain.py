"""``endpoint_drain``: wait until no EndpointSlice routes traffic to this pod.

List the namespace's slices (all Services, or the configured ones), keep the
ones with an endpoint of this pod (``targetRef.uid``, or an address of the pod
when there is no targetRef to go by), then watch until each of those
endpoints is gone, ``ready: false`` or ``terminating: true``.  Watches resume
from the last version seen (bookmarks included) when the server ends them,
and relist on 410 Gone.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import trio

from supervisor import Deadline

from ._api import APIError
from ._connection import Connection
from ._identity import PodIdentity
from ._settings import DrainSettings

__all__ = [
    "DrainResult",
    "EndpointDrain",
    "SliceTracker",
    "endpoint_routes",
    "missing_services",
    "slice_selector",
]

SERVICE_LABEL = "kubernetes.io/service-name"
MANAGED_BY_LABEL = "endpointslice.kubernetes.io/managed-by"
# Dropped watch connections resumed before the drain gives up on the API.
_WATCH_DROPS = 3


def slice_selector(services: Iterable[str], managed_by: Iterable[str] = ()) -> str | None:
    """The label selector for the slices to follow (None: all of them)."""
    terms = []
    for label, values in ((SERVICE_LABEL, services), (MANAGED_BY_LABEL, managed_by)):
        names = sorted(set(values))
        if names:
            terms.append(f"{label} in ({','.join(names)})")
    return ",".join(terms) or None


def endpoint_routes(endpoint: Mapping[str, Any]) -> bool:
    """Whether kube-proxy and friends still send new connections to it.

    ``ready`` nil means ready and ``terminating`` nil means false
    (KEP-1672): only an explicit ``ready: false`` or ``terminating: true``
    takes an endpoint out of rotation.
    """
    conditions = endpoint.get("conditions") or {}
    return conditions.get("ready") is not False and conditions.get("terminating") is not True


def missing_services(services: Iterable[str], slices: Iterable[Mapping[str, Any]]) -> list[str]:
    """The named Services that have no EndpointSlice at all.

    The EndpointSlice controller keeps a slice (empty if need be) for every
    Service with a selector, so a name with none is a Service that does not
    exist (a typo, another namespace) or has no selector and no Endpoints.
    """
    present = {str(((s.get("metadata") or {}).get("labels") or {}).get(SERVICE_LABEL, "")) for s in slices}
    return sorted(set(services) - present)


def _service_of(slice_obj: Mapping[str, Any]) -> tuple[str, str]:
    labels = (slice_obj.get("metadata") or {}).get("labels") or {}
    return str(labels.get(SERVICE_LABEL, "")), str(slice_obj.get("addressType", ""))


def _is_ready(endpoint: Mapping[str, Any]) -> bool:
    return (endpoint.get("conditions") or {}).get("ready") is not False


@dataclass
class SliceTracker:
    """Which slices still have a routing endpoint of this pod.

    What "drained" means follows what kube-proxy does with the conditions
    (KEP-1669): an endpoint of ours is out of rotation once it is gone,
    ``ready: false`` or ``terminating: true``.  Two cases stay routed all the
    same, and no amount of waiting changes that before the pod is gone, so
    they count as drained but are reported (``notes``):

    * ``ready: true`` and ``terminating: true``: the Service has
      ``publishNotReadyAddresses``, its endpoints stay ready while they
      terminate and kube-proxy keeps using them;
    * ``serving: true`` and terminating while no other endpoint of the
      Service (same address family) is ready: kube-proxy falls back to
      serving terminating endpoints, this pod is the last one serving.
    """

    pod: PodIdentity
    # slice name -> does one of our endpoints in it still route?
    slices: dict[str, bool] = field(default_factory=dict)
    # slice name -> (service, address type, other pods' ready endpoints), for every slice seen
    others_ready: dict[str, tuple[str, str, int]] = field(default_factory=dict)
    # slice name -> (service, address type, our endpoint's conditions), for slices with ours
    ours: dict[str, tuple[str, str, dict[str, Any]]] = field(default_factory=dict)

    def is_ours(self, endpoint: Mapping[str, Any]) -> bool:
        target = endpoint.get("targetRef") or {}
        if target.get("kind", "Pod") == "Pod":
            if self.pod.uid and target.get("uid"):
                return bool(target["uid"] == self.pod.uid)
            if target.get("name"):
                # No UID to compare (the pod's is unknown): the name is unique
                # in the namespace at any one time.
                return bool(
                    target["name"] == self.pod.name
                    and target.get("namespace", self.pod.namespace) == self.pod.namespace
                )
        addresses = endpoint.get("addresses") or []
        return any(address in self.pod.ips for address in addresses)

    def update(self, slice_obj: Mapping[str, Any]) -> None:
        name = str((slice_obj.get("metadata") or {}).get("name", ""))
        service, family = _service_of(slice_obj)
        endpoints = slice_obj.get("endpoints") or []
        ours = [e for e in endpoints if self.is_ours(e)]
        others = sum(1 for e in endpoints if not self.is_ours(e) and _is_ready(e))
        self.others_ready[name] = (service, family, others)
        if ours:
            self.slices[name] = any(endpoint_routes(e) for e in ours)
            self.ours[name] = (service, family, dict(ours[0].get("conditions") or {}))
        # Our endpoint was removed from this slice: that slice is done.
        elif name in self.slices:
            self.slices[name] = False
            self.ours.pop(name, None)

    def remove(self, slice_obj: Mapping[str, Any]) -> None:
        name = str((slice_obj.get("metadata") or {}).get("name", ""))
        self.others_ready.pop(name, None)
        self.ours.pop(name, None)
        if name in self.slices:
            self.slices[name] = False

    def reset(self, slices: Iterable[Mapping[str, Any]]) -> None:
        self.slices.clear()
        self.others_ready.clear()
        self.ours.clear()
        for slice_obj in slices:
            self.update(slice_obj)

    def notes(self) -> list[str]:
        """Services that still send this pod traffic although its endpoints
        are drained as far as conditions go (see the class)."""
        notes: set[str] = set()
        for service, family, conditions in self.ours.values():
            if not conditions.get("terminating"):
                continue
            if conditions.get("ready") is True:
                notes.add(
                    f"Service {service} publishes not-ready addresses: this pod's {family} endpoint stays "
                    "ready while it terminates and kube-proxy keeps routing to it until the pod is gone"
                )
                continue
            ready_elsewhere = sum(
                count for svc, fam, count in self.others_ready.values() if (svc, fam) == (service, family)
            )
            if conditions.get("serving") is True and ready_elsewhere == 0:
                notes.add(
                    f"this pod is the last serving endpoint of Service {service} ({family}): with no ready "
                    "endpoint left, kube-proxy keeps sending it traffic while it serves"
                )
        return sorted(notes)

    def routing_services(self) -> list[str]:
        """The Services whose slices still route to this pod."""
        return sorted({self.ours[name][0] for name in self.routing if name in self.ours})

    @property
    def routing(self) -> list[str]:
        return sorted(name for name, routes in self.slices.items() if routes)

    @property
    def drained(self) -> bool:
        return not self.routing


@dataclass
class DrainResult:
    """How the drain ended: ``drained``, ``nothing`` (the pod is in no
    slice), ``fallback`` (the API failed; ``reason`` says why), ``timeout``
    or ``no time`` (the deadline left no time to look: ``reason``).

    ``looked``: the slices were listed, so the counts are facts; ``routed``:
    why the pod still gets traffic although the drain is over (a timeout
    with slices still routing, or the cases of ``SliceTracker.notes``)."""

    outcome: str
    slices: int = 0
    reason: str = ""
    waited: float = 0.0
    looked: bool = True
    routed: list[str] = field(default_factory=list)

    def describe(self) -> str:
        """The timeline's detail."""
        if self.outcome == "nothing":
            return self.reason or "in no EndpointSlice"
        if self.outcome in ("fallback", "no time"):
            return self.reason
        if self.outcome == "timeout":
            return f"{self.slices} slices still routing" if self.looked else "the slices were never listed"
        return f"{self.slices} slices"


class EndpointDrain:
    """One drain: the list, then watches until no slice routes to the pod or
    trio time ``until``.

    API failures are not raised: they end the watch with outcome
    ``fallback`` and the caller waits the fixed delay instead.
    """

    def __init__(
        self,
        connection: Connection,
        settings: DrainSettings,
        deadline: Deadline,
        log: logging.Logger,
        *,
        until: float,
        services: Sequence[str] = (),
    ) -> None:
        """``services``: the Services whose slices to follow (default: the
        ``services`` setting; both empty: every slice of the namespace)."""
        self.api = connection.api
        self.pod = connection.pod
        self.settings = settings
        self.deadline = deadline
        self.log = log
        self.until = until
        self.selector = slice_selector(services or settings.services, settings.managed_by)
        self.tracker = SliceTracker(connection.pod)
        self.progress = _Progress(log, settings.progress_interval, until)
        self.version = ""  # the resourceVersion to watch from

    async def run(self) -> DrainResult:
        started = trio.current_time()
        failure: APIError | None = None
        looked = False
        with trio.move_on_at(self.until) as scope:
            try:
                items, version = await self._list()
            except APIError as exc:
                return DrainResult("fallback", reason=str(exc), waited=trio.current_time() - started)
            looked = True
            self.tracker.reset(items)
            for service in missing_services(self.settings.services, items):
                self.log.warning(
                    "endpoint_drain.services names %r, but no EndpointSlice belongs to a Service of that "
                    "name in namespace %s: nothing to wait for there (is the name right?)",
                    service,
                    self.pod.namespace,
                )
            if not self.tracker.slices:
                return DrainResult("nothing")
            self.progress.report(self.tracker, force=True)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self.progress.tick, self.tracker)
                failure = await self._follow(version)
                nursery.cancel_scope.cancel()
        waited = trio.current_time() - started
        if failure is not None:
            return DrainResult("fallback", len(self.tracker.slices), str(failure), waited)
        if scope.cancelled_caught:
            if not looked:
                return DrainResult("timeout", waited=waited, looked=False)
            routed = [f"Service {service} still routes to this pod" for service in self.tracker.routing_services()]
            return DrainResult("timeout", len(self.tracker.routing), waited=waited, routed=routed)
        notes = self.tracker.notes()
        for note in notes:
            self.log.warning("%s", note)
        return DrainResult("drained", len(self.tracker.slices), waited=waited, routed=notes)

    async def _list(self) -> tuple[list[dict[str, Any]], str]:
        return await self.api.list_endpoint_slices(self.pod.namespace, self.selector, self.deadline)

    async def _follow(self, version: str) -> APIError | None:
        """Watch (again and again) until drained; the error that stopped it, if any."""
        self.version = version
        drops = 0
        while not self.tracker.drained:
            left = self.deadline.remaining_for_hooks()
            seconds = max(1, min(int(self.settings.watch_timeout), int(left) + 1))
            try:
                await self._watch_once(seconds)
            except APIError as exc:
                if exc.status is None and drops < _WATCH_DROPS:
                    # The connection dropped mid-watch (a server restart, an
                    # idle timeout on the way): client-go's reflectors watch
                    # again from the last version seen, and so do we, a few
                    # times; a server that stays away ends in the fallback.
                    drops += 1
                    self.log.info("watch connection lost (%s): watching again from version %s", exc, self.version)
                    continue
                if exc.status != 410:
                    return exc
                self.log.info("watch expired (410 Gone): listing the EndpointSlices again")
                try:
                    items, self.version = await self._list()
                except APIError as relist_error:
                    return relist_error
                known = set(self.tracker.slices)
                self.tracker.reset(items)
                # A slice we followed that is gone now no longer routes to us.
                for name in known - set(self.tracker.slices):
                    self.tracker.slices[name] = False
                self.progress.report(self.tracker)
        return None

    async def _watch_once(self, seconds: int) -> None:
        """One watch request from ``self.version``, which follows the events."""
        tracker = self.tracker
        error: APIError | None = None
        async with self.api.watch_endpoint_slices(self.pod.namespace, self.selector, self.version, seconds) as events:
            async for item in events:
                if isinstance(item, APIError):
                    # Raised outside the watch's nursery, as itself rather
                    # than inside an exception group.
                    error = item
                    break
                obj = item["object"]
                self.version = str((obj.get("metadata") or {}).get("resourceVersion") or self.version)
                kind = item["type"]
                if kind in ("ADDED", "MODIFIED"):
                    tracker.update(obj)
                elif kind == "DELETED":
                    tracker.remove(obj)
                else:
                    continue  # BOOKMARK: only the version moves on
                self.progress.report(tracker)
                if tracker.drained:
                    break
        if error is not None:
            raise error


class _Progress:
    """ "2 of 3 slices still route to this pod, 11.2 s left", when the
    count changes and every ``interval`` seconds otherwise."""

    def __init__(self, log: logging.Logger, interval: float, until: float) -> None:
        self._log = log
        self._interval = interval
        self._total = 0
        self._until = until
        self._last_count = -1
        self._last_time = -float("inf")

    def report(self, tracker: SliceTracker, *, force: bool = False) -> None:
        now = trio.current_time()
        count = len(tracker.routing)
        self._total = max(self._total, len(tracker.slices))
        if count == 0:
            return
        if not force and count == self._last_count and now - self._last_time < self._interval:
            return
        self._last_count, self._last_time = count, now
        self._log.info(
            "%d of %d slices still route to this pod, %.1f s left (%s)",
            count,
            self._total,
            max(0.0, self._until - now),
            ", ".join(tracker.routing[:5]) + (", ..." if count > 5 else ""),
        )

    async def tick(self, tracker: SliceTracker) -> None:
        while True:
            await trio.sleep(self._interval)
            self.report(tracker)
