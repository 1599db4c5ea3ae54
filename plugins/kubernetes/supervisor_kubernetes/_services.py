"""Which Services select this pod, kept current while the pod runs.

Without ``endpoint_drain.services`` the drain would have to list and watch
every EndpointSlice of the namespace: a rollout of N pods in a namespace of
S slices reads N times S objects from the API server.  Instead the Services are
listed once at start (in the background, where time costs nothing) and
followed by a watch; each Service's selector is matched against the pod's
labels, and at SIGTERM the drain reads only the slices of the Services that
select the pod (``kubernetes.io/service-name in (...)``), however many
others the namespace holds.  A Service without a selector is counted in:
its slices are written by hand or mirrored from an Endpoints object, and
may name the pod by address.

Without the right to list or watch Services, the index gives up and the
drain reads every slice, as before (a warning says so once).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import trio

from ._api import KubeAPI
from ._errors import APIError

__all__ = ["ServiceIndex", "selects"]

# The server ends a watch after this many seconds; it is resumed from the
# last version seen, so a longer one only saves requests.
_WATCH_SECONDS = 300
# A watch that failed without an answer (a restart of the API server) is
# tried again after this long, for as long as the pod runs.
_RETRY_AFTER = 1.0


def selects(service: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """Whether the Service's slices may route to a pod with ``labels``: its
    selector matches them, or it has none (slices made by someone else)."""
    selector = (service.get("spec") or {}).get("selector") or {}
    return all(labels.get(key) == value for key, value in selector.items())


class ServiceIndex:
    """The names of the Services that select this pod, or None while they
    are unknown (not listed yet, or not allowed: read every slice)."""

    def __init__(self, api: KubeAPI, namespace: str, labels: Mapping[str, str], log: logging.Logger) -> None:
        self._api = api
        self._namespace = namespace
        self._labels = dict(labels)
        self._log = log
        self._selecting: dict[str, bool] = {}
        self._told: list[str] | None = None
        self.known = False
        # Set once the Services have been listed, or the index gave up.
        self.settled = trio.Event()

    @property
    def names(self) -> list[str] | None:
        return sorted(name for name, selecting in self._selecting.items() if selecting) if self.known else None

    async def follow(self) -> None:
        """List, then watch until cancelled (the shutdown begins)."""
        while True:
            try:
                items, version = await self._api.list_services(self._namespace)
            except APIError as exc:
                if exc.status is None:
                    await trio.sleep(_RETRY_AFTER)
                    continue
                self._give_up(exc)
                return
            self._selecting = {_name(item): selects(item, self._labels) for item in items}
            self.known = True
            self._tell()
            self.settled.set()
            try:
                await self._watch(version)
            except APIError as exc:
                if exc.status != 410:
                    self._give_up(exc)
                    return
                # 410 Gone: the version is too old; list again.

    async def _watch(self, version: str) -> None:
        """Follow changes from ``version``, resuming after the server's
        timeouts and dropped connections; raises the first error status."""
        while True:
            try:
                async with self._api.watch_services(self._namespace, version, _WATCH_SECONDS) as events:
                    async for item in events:
                        if isinstance(item, APIError):
                            raise item
                        obj = item["object"]
                        version = str((obj.get("metadata") or {}).get("resourceVersion") or version)
                        if item["type"] in ("ADDED", "MODIFIED"):
                            self._selecting[_name(obj)] = selects(obj, self._labels)
                        elif item["type"] == "DELETED":
                            self._selecting.pop(_name(obj), None)
                        self._tell()
            except APIError as exc:
                if exc.status is not None:
                    raise
                await trio.sleep(_RETRY_AFTER)

    def _tell(self) -> None:
        """A debug line whenever the set of selecting Services changes."""
        names = self.names
        if names != self._told:
            self._told = names
            self._log.debug("Services that select this pod: %s", ", ".join(names or ()) or "none")

    def _give_up(self, exc: APIError) -> None:
        self.known = False
        self.settled.set()
        self._log.warning(
            "cannot follow the Services of namespace %s (%s): the endpoint drain reads every EndpointSlice "
            "of the namespace instead of those of the Services that select this pod",
            self._namespace,
            exc,
        )


def _name(service: Mapping[str, Any]) -> str:
    return str((service.get("metadata") or {}).get("name") or "")
