"""Kubernetes Events on the pod, so that ``kubectl describe pod`` tells the
story of its shutdown.  Best effort: an event that cannot be written is
logged once and never delays the shutdown by more than a second."""

from __future__ import annotations

import logging
import time

import trio

from supervisor import Deadline

from ._api import APIError, KubeAPI, micro_now
from ._identity import PodIdentity

__all__ = ["REPORTING_CONTROLLER", "EventRecorder", "cut_utf8", "event_name"]

REPORTING_CONTROLLER = "pid1-supervisor/kubernetes"
_EVENT_TIMEOUT = 1.0
# The API server's limits, in bytes (Go's len() of the string): 1 kB for the
# note, 253 for an object name.
NOTE_LIMIT = 1024
_NAME_LIMIT = 253


def cut_utf8(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` bytes of UTF-8, never inside a
    character: the server counts bytes, and rejects the whole Event (422)
    for a note one byte too long."""
    data = text.encode()
    if len(data) <= limit:
        return text
    return data[:limit].decode(errors="ignore")


def event_name(pod: str, now_ns: int | None = None) -> str:
    """``<pod>.<hex nanoseconds>``, as client-go's recorder names Events.

    A ``generateName`` of ``<pod>.`` is what comes to mind, but the server
    validates the prefix itself as a DNS subdomain and a trailing dot is not
    one (422 Invalid): a name has to be complete.
    """
    suffix = f".{time.time_ns() if now_ns is None else now_ns:x}"
    return pod[: _NAME_LIMIT - len(suffix)] + suffix


class EventRecorder:
    def __init__(self, api: KubeAPI | None, pod: PodIdentity, log: logging.Logger) -> None:
        self._api = api
        self._pod = pod
        self._log = log
        self._warned = False

    async def record(
        self,
        reason: str,
        note: str,
        *,
        action: str,
        deadline: Deadline | None = None,
        warning: bool = False,
    ) -> None:
        if self._api is None:
            return
        regarding = {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": self._pod.name,
            "namespace": self._pod.namespace,
        }
        if self._pod.uid:
            regarding["uid"] = self._pod.uid
        event = {
            "apiVersion": "events.k8s.io/v1",
            "kind": "Event",
            "metadata": {"name": event_name(self._pod.name), "namespace": self._pod.namespace},
            "eventTime": micro_now(),
            "reportingController": REPORTING_CONTROLLER,
            "reportingInstance": self._pod.name[:128],
            "action": action,
            "reason": reason,
            "type": "Warning" if warning else "Normal",
            "note": cut_utf8(note, NOTE_LIMIT),
            "regarding": regarding,
        }
        with trio.move_on_after(_EVENT_TIMEOUT):
            try:
                await self._api.create_event(self._pod.namespace, event, deadline)
            except APIError as exc:
                if not self._warned:
                    self._warned = True
                    self._log.warning("cannot record Kubernetes events on the pod: %s", exc)
