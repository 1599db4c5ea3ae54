"""The object store behind the test API server: etcd plus the watch cache.

One global, monotonically increasing resourceVersion; every write bumps it and
is kept in a bounded history so that watches can resume from a version.  A
watch from a version older than the history (or after ``compact()``) gets the
in-stream ``410 Expired`` error a real server sends, and ``expire_watches()``
ends every open watch the same way, as a watch-cache restart does.
"""

from __future__ import annotations

import copy
import datetime
import queue
import re
import threading
import uuid
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "RESOURCES",
    "ApiError",
    "Change",
    "Resource",
    "Store",
    "Watcher",
    "micro_time",
    "status_body",
]

Obj = dict[str, Any]
Matcher = Callable[[Mapping[str, Any]], bool]

_NAME_FIELDS = frozenset({"metadata.name", "metadata.namespace"})


@dataclass(frozen=True)
class Resource:
    """One REST resource: where it lives and how it is called."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True
    field_selectors: frozenset[str] = _NAME_FIELDS
    micro_time_fields: tuple[tuple[str, ...], ...] = ()

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


RESOURCES: dict[tuple[str, str], Resource] = {
    (r.api_version, r.plural): r
    for r in (
        Resource("", "v1", "namespaces", "Namespace", namespaced=False),
        Resource(
            "",
            "v1",
            "pods",
            "Pod",
            field_selectors=_NAME_FIELDS | {"spec.nodeName", "status.phase", "status.podIP"},
        ),
        Resource("discovery.k8s.io", "v1", "endpointslices", "EndpointSlice"),
        Resource(
            "coordination.k8s.io",
            "v1",
            "leases",
            "Lease",
            micro_time_fields=(("spec", "acquireTime"), ("spec", "renewTime")),
        ),
        Resource(
            "",
            "v1",
            "events",
            "Event",
            field_selectors=_NAME_FIELDS | {"involvedObject.uid", "involvedObject.name", "reason", "type"},
        ),
        Resource(
            "events.k8s.io",
            "v1",
            "events",
            "Event",
            field_selectors=_NAME_FIELDS | {"regarding.uid", "regarding.name", "reason", "type"},
            micro_time_fields=(("eventTime",),),
        ),
    )
}

# metav1.MicroTime: Go parses it with RFC3339Micro, so exactly six fractional
# digits are required; a client that writes "...:05+00:00" gets a 400.
_MICRO_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}(Z|[+-]\d{2}:\d{2})$")


def micro_time(moment: datetime.datetime | None = None) -> str:
    """A MicroTime string as the API server writes it."""
    moment = moment or datetime.datetime.now(datetime.UTC)
    return moment.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _time(moment: datetime.datetime) -> str:
    return moment.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _qualified(resource: Resource) -> str:
    """``leases.coordination.k8s.io``, ``pods``: as the server names them in messages."""
    return f"{resource.plural}.{resource.group}" if resource.group else resource.plural


class ApiError(Exception):
    """An error response: becomes a ``Status`` object with this code."""

    def __init__(self, code: int, reason: str, message: str, details: Obj | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details


def status_body(code: int, reason: str, message: str, details: Obj | None = None) -> Obj:
    """A ``meta/v1 Status`` failure, byte for byte what the server sends."""
    body: Obj = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if details:
        body["details"] = details
    return body


@dataclass
class Change:
    """One write, as the watch cache remembers it."""

    rv: int
    resource: Resource
    namespace: str
    kind: str  # ADDED, MODIFIED, DELETED
    old: Obj | None
    new: Obj


@dataclass(eq=False)
class Watcher:
    """One open watch: the server's handler drains ``events``."""

    resource: Resource
    namespace: str | None
    matches: Matcher
    events: queue.SimpleQueue[Obj | None] = field(default_factory=queue.SimpleQueue)
    closed: bool = False

    def event_for(self, change: Change) -> Obj | None:
        if change.resource != self.resource:
            return None
        if self.namespace is not None and change.namespace != self.namespace:
            return None
        new_match = self.matches(change.new)
        old_match = change.old is not None and self.matches(change.old)
        kind = change.kind
        if kind == "MODIFIED":
            # A selector watch sees an object enter or leave its selection
            # as ADDED or DELETED, as the watch cache reports it.
            if old_match and not new_match:
                kind = "DELETED"
            elif new_match and not old_match:
                kind = "ADDED"
            elif not new_match:
                return None
        elif kind == "DELETED":
            if not old_match and not new_match:
                return None
        elif not new_match:
            return None
        return {"type": kind, "object": change.new}


class Store:
    """Thread-safe objects, versions, history and watchers."""

    def __init__(self, *, history_limit: int = 100_000, first_version: int = 1000) -> None:
        self._lock = threading.Lock()
        self._rv = first_version
        self._objects: dict[tuple[Resource, str, str], Obj] = {}
        self._history: deque[Change] = deque(maxlen=history_limit)
        self._oldest_watchable = first_version
        self._watchers: set[Watcher] = set()
        self.on_change: list[Callable[[Change], None]] = []

    # -- reads ---------------------------------------------------------------

    @property
    def resource_version(self) -> int:
        with self._lock:
            return self._rv

    def get(self, resource: Resource, namespace: str, name: str) -> Obj:
        with self._lock:
            return copy.deepcopy(self._get_locked(resource, namespace, name))

    def list(self, resource: Resource, namespace: str | None, matches: Matcher) -> tuple[list[Obj], int]:
        with self._lock:
            items = [
                copy.deepcopy(obj)
                for (res, ns, _), obj in sorted(self._objects.items(), key=lambda item: (item[0][1], item[0][2]))
                if res == resource and (namespace is None or ns == namespace) and matches(obj)
            ]
            return items, self._rv

    # -- writes --------------------------------------------------------------

    def create(self, resource: Resource, namespace: str, obj: Obj) -> Obj:
        obj = copy.deepcopy(obj)
        self._validate(resource, obj)
        meta = obj.setdefault("metadata", {})
        if not meta.get("name"):
            if not meta.get("generateName"):
                raise ApiError(
                    422,
                    "Invalid",
                    f'{resource.kind} "" is invalid: metadata.name: Required value: name or generateName is required',
                )
            meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
        name = meta["name"]
        with self._lock:
            key = (resource, namespace, name)
            if key in self._objects:
                raise ApiError(
                    409,
                    "AlreadyExists",
                    f'{_qualified(resource)} "{name}" already exists',
                    {"name": name, "group": resource.group, "kind": resource.plural},
                )
            obj["apiVersion"] = resource.api_version
            obj["kind"] = resource.kind
            if resource.namespaced:
                meta["namespace"] = namespace
            meta["uid"] = meta.get("uid") or str(uuid.uuid4())
            meta["creationTimestamp"] = _time(datetime.datetime.now(datetime.UTC))
            meta.pop("deletionTimestamp", None)
            meta.pop("deletionGracePeriodSeconds", None)
            self._commit_locked(resource, namespace, "ADDED", None, obj)
            return copy.deepcopy(obj)

    def replace(self, resource: Resource, namespace: str, name: str, obj: Obj) -> Obj:
        """PUT: optimistic concurrency on ``metadata.resourceVersion``."""
        obj = copy.deepcopy(obj)
        self._validate(resource, obj)
        meta = obj.setdefault("metadata", {})
        if meta.get("name", name) != name:
            raise ApiError(400, "BadRequest", "the name of the object does not match the name on the URL")
        with self._lock:
            current = self._get_locked(resource, namespace, name)
            cur_meta = current["metadata"]
            sent_rv = meta.get("resourceVersion")
            if sent_rv and sent_rv != cur_meta["resourceVersion"]:
                raise ApiError(
                    409,
                    "Conflict",
                    f'Operation cannot be fulfilled on {_qualified(resource)} "{name}": the object '
                    "has been modified; please apply your changes to the latest version "
                    "and try again",
                    {"name": name, "group": resource.group, "kind": resource.plural},
                )
            obj["apiVersion"] = resource.api_version
            obj["kind"] = resource.kind
            meta["name"] = name
            if resource.namespaced:
                meta["namespace"] = namespace
            # Server-owned fields survive whatever the client sent.
            for key in (
                "uid",
                "creationTimestamp",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
            ):
                if key in cur_meta:
                    meta[key] = cur_meta[key]
                else:
                    meta.pop(key, None)
            if meta.get("deletionTimestamp") and not meta.get("finalizers") and resource.plural != "pods":
                self._commit_locked(resource, namespace, "DELETED", current, obj)
            else:
                self._commit_locked(resource, namespace, "MODIFIED", current, obj)
            return copy.deepcopy(obj)

    def delete(self, resource: Resource, namespace: str, name: str, grace_seconds: int | None = None) -> Obj:
        """DELETE.  Pods are deleted gracefully, as with a kubelet on the
        node: ``deletionTimestamp`` = now + grace, and the object stays until
        ``finish_pod_deletion`` (or a delete with grace 0).  Anything else with
        finalizers stays marked; without, it goes at once."""
        with self._lock:
            current = self._get_locked(resource, namespace, name)
            meta = current["metadata"]
            if resource.plural == "pods":
                if grace_seconds is None:
                    grace_seconds = int(current.get("spec", {}).get("terminationGracePeriodSeconds", 30))
                already = meta.get("deletionGracePeriodSeconds")
                if grace_seconds > 0 or meta.get("finalizers"):
                    if already is not None and already <= grace_seconds:
                        return copy.deepcopy(current)  # a delete may only shorten
                    updated = copy.deepcopy(current)
                    now = datetime.datetime.now(datetime.UTC)
                    updated["metadata"]["deletionTimestamp"] = _time(now + datetime.timedelta(seconds=grace_seconds))
                    updated["metadata"]["deletionGracePeriodSeconds"] = grace_seconds
                    self._commit_locked(resource, namespace, "MODIFIED", current, updated)
                    return copy.deepcopy(updated)
            elif meta.get("finalizers"):
                if meta.get("deletionTimestamp"):
                    return copy.deepcopy(current)
                updated = copy.deepcopy(current)
                updated["metadata"]["deletionTimestamp"] = _time(datetime.datetime.now(datetime.UTC))
                updated["metadata"]["deletionGracePeriodSeconds"] = 0
                self._commit_locked(resource, namespace, "MODIFIED", current, updated)
                return copy.deepcopy(updated)
            gone = copy.deepcopy(current)
            self._commit_locked(resource, namespace, "DELETED", current, gone)
            return copy.deepcopy(gone)

    # -- watches -------------------------------------------------------------

    def watch(self, resource: Resource, namespace: str | None, matches: Matcher, since: str | None) -> Watcher:
        """Open a watch.  ``since`` unset or "0": synthetic ADDED events for
        the current state first; otherwise every change after that version."""
        watcher = Watcher(resource, namespace, matches)
        with self._lock:
            if not since or since == "0":
                for (res, ns, _), obj in sorted(self._objects.items(), key=lambda i: i[0][2]):
                    if res == resource and (namespace is None or ns == namespace) and matches(obj):
                        watcher.events.put({"type": "ADDED", "object": copy.deepcopy(obj)})
            else:
                try:
                    start = int(since)
                except ValueError:
                    raise ApiError(400, "BadRequest", f"invalid resource version: {since}") from None
                if start < self._oldest_watchable:
                    watcher.events.put(self._expired_event(start))
                    watcher.events.put(None)
                    watcher.closed = True
                    return watcher
                for change in self._history:
                    if change.rv > start and (event := watcher.event_for(change)):
                        watcher.events.put(copy.deepcopy(event))
            self._watchers.add(watcher)
        return watcher

    def stop_watch(self, watcher: Watcher) -> None:
        with self._lock:
            self._watchers.discard(watcher)
            watcher.closed = True

    def bookmark_version(self, watcher: Watcher) -> int | None:
        """The version a BOOKMARK may announce now, or None while events for
        this watcher are still queued (a bookmark must not overtake them)."""
        with self._lock:
            return None if not watcher.events.empty() else self._rv

    def compact(self) -> int:
        """Forget the history: a watch from any older version gets 410."""
        with self._lock:
            self._history.clear()
            self._oldest_watchable = self._rv
            return self._rv

    def expire_watches(self) -> int:
        """End every open watch with ``ERROR 410 Expired`` and forget the
        history, as when the watch cache is re-initialized.  Returns how many
        watches were ended."""
        with self._lock:
            self._history.clear()
            self._oldest_watchable = self._rv
            ended = list(self._watchers)
            for watcher in ended:
                watcher.events.put(self._expired_event(self._rv - 1))
                watcher.events.put(None)
                watcher.closed = True
            self._watchers.clear()
            return len(ended)

    def close(self) -> None:
        with self._lock:
            for watcher in self._watchers:
                watcher.events.put(None)
                watcher.closed = True
            self._watchers.clear()

    # -- internals -----------------------------------------------------------

    def _expired_event(self, start: int) -> Obj:
        return {
            "type": "ERROR",
            "object": status_body(410, "Expired", f"too old resource version: {start} ({self._oldest_watchable})"),
        }

    def _get_locked(self, resource: Resource, namespace: str, name: str) -> Obj:
        try:
            return self._objects[(resource, namespace, name)]
        except KeyError:
            raise ApiError(
                404,
                "NotFound",
                f'{_qualified(resource)} "{name}" not found',
                {"name": name, "group": resource.group, "kind": resource.plural},
            ) from None

    def _commit_locked(self, resource: Resource, namespace: str, kind: str, old: Obj | None, new: Obj) -> None:
        self._rv += 1
        new["metadata"]["resourceVersion"] = str(self._rv)
        key = (resource, namespace, new["metadata"]["name"])
        if kind == "DELETED":
            self._objects.pop(key, None)
        else:
            self._objects[key] = new
        change = Change(self._rv, resource, namespace, kind, copy.deepcopy(old), copy.deepcopy(new))
        if len(self._history) == self._history.maxlen:
            self._oldest_watchable = self._history[0].rv
        self._history.append(change)
        for watcher in self._watchers:
            if event := watcher.event_for(change):
                watcher.events.put(event)
        for callback in self.on_change:
            callback(change)

    @staticmethod
    def _validate(resource: Resource, obj: Obj) -> None:
        for path in resource.micro_time_fields:
            node: Any = obj
            for part in path:
                node = node.get(part) if isinstance(node, Mapping) else None
            if node is not None and not (isinstance(node, str) and _MICRO_TIME.match(node)):
                raise ApiError(
                    400,
                    "BadRequest",
                    f'parsing time "{node}" as "2006-01-02T15:04:05.000000Z07:00": cannot parse',
                )
