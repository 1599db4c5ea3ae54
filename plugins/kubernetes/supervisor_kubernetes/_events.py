"""Kubernetes Events on the pod, so that ``kubectl describe pod`` tells the
story of its shutdown.  Best effort: an event that cannot be written is
logged once and never delays the shutdown by more than a second."""

from __future__ import annotations

import logging

import trio

from supervisor import Deadline

from ._api import APIError, KubeAPI, micro_now
from ._identity import PodIdentity

__all__ = ["REPORTING_CONTROLLER", "EventRecorder"]

REPORTING_CONTROLLER = "pid1-supervisor/kubernetes"
_EVENT_TIMEOUT = 1.0


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
            "metadata": {"generateName": f"{self._pod.name}.", "namespace": self._pod.namespace},
            "eventTime": micro_now(),
            "reportingController": REPORTING_CONTROLLER,
            "reportingInstance": self._pod.name[:128],
            "action": action,
            "reason": reason,
            "type": "Warning" if warning else "Normal",
            "note": note[:1024],
            "regarding": regarding,
        }
        with trio.move_on_after(_EVENT_TIMEOUT):
            try:
                await self._api.create_event(self._pod.namespace, event, deadline)
            except APIError as exc:
                if not self._warned:
                    self._warned = True
                    self._log.warning("cannot record Kubernetes events on the pod: %s", exc)
