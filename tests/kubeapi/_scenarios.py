"""Scenario helpers: set up and drive a namespace through the real client.

Everything here goes through the API (never the fake's store), so the same
scenario runs against the test API server and against a real cluster.  Pods
are created bound to a node that does not exist and with a finalizer, so that
a real API server deletes them gracefully (deletionTimestamp = now + grace)
and keeps them until ``cleanup()``, exactly as for a pod a kubelet runs.
EndpointSlices are created by hand, with a ``managed-by`` label of their own
so that no controller of a real cluster touches them.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ._leader import LeaderElector

__all__ = ["Cluster", "Deletion", "Endpoint"]

FINALIZER = "pid1-supervisor.test/keep"
MANAGED_BY = "pid1-supervisor-tests"
SERVICE_LABEL = "kubernetes.io/service-name"


@dataclass(frozen=True)
class Endpoint:
    """One endpoint of a slice: an address and, for pods, its targetRef."""

    address: str
    pod_name: str | None = None
    pod_uid: str | None = None
    ready: bool = True

    def as_json(self, namespace: str) -> dict[str, Any]:
        endpoint: dict[str, Any] = {
            "addresses": [self.address],
            "conditions": {"ready": self.ready, "serving": self.ready, "terminating": False},
        }
        if self.pod_name:
            endpoint["targetRef"] = {"kind": "Pod", "namespace": namespace, "name": self.pod_name}
            if self.pod_uid:
                endpoint["targetRef"]["uid"] = self.pod_uid
        return endpoint


@dataclass
class Deletion:
    """A pod deletion in progress; ``flipped_at`` (time.monotonic()) is set
    once every endpoint of the pod is terminating."""

    deleted_at: float
    pod: dict[str, Any]
    flipped: threading.Event = field(default_factory=threading.Event)
    last_write_at: float | None = None  # the last slice write was sent
    flipped_at: float | None = None  # ... and answered
    thread: threading.Thread | None = None

    def wait_flipped(self, timeout: float = 30) -> float:
        """When the last endpoint flipped: the moment its write was sent (the
        server applied it between then and ``flipped_at``)."""
        if not self.flipped.wait(timeout):
            raise AssertionError("the endpoints were never flipped")
        assert self.last_write_at is not None
        return self.last_write_at


class Cluster:
    """A namespace to play in, through ``kubernetes`` client calls."""

    def __init__(self, api_client: Any, namespace: str, *, real: bool = False) -> None:
        from kubernetes import client

        self.api_client = api_client
        self.namespace = namespace
        self.real = real
        self.core: Any = client.CoreV1Api(api_client)
        self.discovery: Any = client.DiscoveryV1Api(api_client)
        self.coordination: Any = client.CoordinationV1Api(api_client)
        self.events: Any = client.EventsV1Api(api_client)
        self._exceptions: Any = client.exceptions
        self._electors: list[LeaderElector] = []
        self._threads: list[threading.Thread] = []

    # -- namespace -------------------------------------------------------------

    def create_namespace(self) -> None:
        self.core.create_namespace({"metadata": {"name": self.namespace}})

    # -- pods ------------------------------------------------------------------

    def create_pod(self, name: str, *, grace: int = 30, ip: str | None = None) -> dict[str, Any]:
        body = {
            "metadata": {"name": name, "finalizers": [FINALIZER], "labels": {"app": "pid1-test"}},
            "spec": {
                "nodeName": "pid1-supervisor-test-node-that-does-not-exist",
                "terminationGracePeriodSeconds": grace,
                "containers": [{"name": "main", "image": "registry.invalid/none:latest"}],
            },
        }
        pod = self._raw(self.core.create_namespaced_pod(self.namespace, body, _preload_content=False))
        if ip is not None:
            # The status belongs to the kubelet; a test can only set it through /status.
            pod["status"] = {"podIP": ip, "podIPs": [{"ip": ip}], "phase": "Running"}
            pod = self._raw(self.core.replace_namespaced_pod_status(name, self.namespace, pod, _preload_content=False))
        return pod

    def read_pod(self, name: str) -> dict[str, Any]:
        return self._raw(self.core.read_namespaced_pod(name, self.namespace, _preload_content=False))

    def delete_pod(self, name: str, *, grace: int | None = None) -> dict[str, Any]:
        return self._raw(
            self.core.delete_namespaced_pod(name, self.namespace, grace_period_seconds=grace, _preload_content=False)
        )

    def delete_pod_and_flip(self, name: str, *, grace: int | None = None, flip_after: float = 1.0) -> Deletion:
        """What the control plane does: set the deletionTimestamp now, then
        (as the EndpointSlice controller would, after ``flip_after``) mark
        every endpoint of the pod terminating and not ready."""
        deleted_at = time.monotonic()
        pod = self.delete_pod(name, grace=grace)
        deletion = Deletion(deleted_at, pod)
        uid = pod["metadata"]["uid"]

        def flip() -> None:
            time.sleep(flip_after)

            def sending() -> None:
                deletion.last_write_at = time.monotonic()

            self.set_pod_endpoints(uid, terminating=True, on_write=sending)
            deletion.flipped_at = time.monotonic()
            deletion.flipped.set()

        deletion.thread = threading.Thread(target=flip, daemon=True, name="flip-endpoints")
        deletion.thread.start()
        self._threads.append(deletion.thread)
        return deletion

    # -- endpoint slices -------------------------------------------------------------

    def create_service(
        self,
        service: str,
        endpoints: Sequence[Endpoint],
        *,
        per_slice: int = 100,
        managed_by: str = MANAGED_BY,
    ) -> list[str]:
        """EndpointSlices for ``service``, at most ``per_slice`` endpoints each
        (the controller's default of 100)."""
        names = []
        chunks = [endpoints[i : i + per_slice] for i in range(0, len(endpoints), per_slice)] or [[]]
        for index, chunk in enumerate(chunks):
            name = f"{service}-{index:02d}{uuid.uuid4().hex[:4]}"
            body = {
                "metadata": {
                    "name": name,
                    "labels": {
                        SERVICE_LABEL: service,
                        "endpointslice.kubernetes.io/managed-by": managed_by,
                    },
                },
                "addressType": "IPv4",
                "endpoints": [e.as_json(self.namespace) for e in chunk],
                "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
            }
            self.discovery.create_namespaced_endpoint_slice(self.namespace, body, _preload_content=False)
            names.append(name)
        return names

    def list_slices(self) -> list[dict[str, Any]]:
        page = self._raw(self.discovery.list_namespaced_endpoint_slice(self.namespace, _preload_content=False))
        return list(page["items"])

    def set_pod_endpoints(
        self,
        pod_uid: str,
        *,
        terminating: bool = True,
        remove: bool = False,
        on_write: Callable[[], None] | None = None,
    ) -> int:
        """Flip (or remove) the pod's endpoints in every slice; returns how many
        slices changed.  Conflicts are retried like a controller would;
        ``on_write`` is called right before each write is sent."""
        changed = 0
        for listed in self.list_slices():
            slice_obj = listed
            for _ in range(10):
                endpoints = slice_obj.get("endpoints") or []
                ours = [e for e in endpoints if (e.get("targetRef") or {}).get("uid") == pod_uid]
                if not ours:
                    break
                if remove:
                    slice_obj["endpoints"] = [e for e in endpoints if e not in ours]
                else:
                    for endpoint in ours:
                        endpoint["conditions"] = {
                            "ready": not terminating,
                            "serving": True,
                            "terminating": terminating,
                        }
                if on_write is not None:
                    on_write()
                try:
                    self.discovery.replace_namespaced_endpoint_slice(
                        slice_obj["metadata"]["name"],
                        self.namespace,
                        slice_obj,
                        _preload_content=False,
                    )
                except self._exceptions.ApiException as exc:
                    if exc.status != 409:
                        raise
                    slice_obj = self._raw(
                        self.discovery.read_namespaced_endpoint_slice(
                            slice_obj["metadata"]["name"], self.namespace, _preload_content=False
                        )
                    )
                    continue
                changed += 1
                break
        return changed

    # -- leases ----------------------------------------------------------------

    def create_lease(self, name: str, holder: str, *, duration: int = 15) -> dict[str, Any]:
        from ._leader import _micro_now

        stamp = _micro_now()
        body = {
            "metadata": {"name": name},
            "spec": {
                "holderIdentity": holder,
                "leaseDurationSeconds": duration,
                "acquireTime": stamp,
                "renewTime": stamp,
                "leaseTransitions": 3,
            },
        }
        return self._raw(self.coordination.create_namespaced_lease(self.namespace, body, _preload_content=False))

    def read_lease(self, name: str) -> dict[str, Any]:
        return self._raw(self.coordination.read_namespaced_lease(name, self.namespace, _preload_content=False))

    def elector(self, lease: str, identity: str, *, retry_period: float = 0.5, duration: int = 15) -> LeaderElector:
        """A client-go style candidate (call ``start()``); stopped at cleanup."""
        elector = LeaderElector(
            self.api_client,
            self.namespace,
            lease,
            identity,
            lease_duration=duration,
            retry_period=retry_period,
        )
        self._electors.append(elector)
        return elector

    def list_events(self) -> list[dict[str, Any]]:
        page = self._raw(self.events.list_namespaced_event(self.namespace, _preload_content=False))
        return list(page["items"])

    # -- cleanup ---------------------------------------------------------------

    def cleanup(self) -> None:
        """Stop the candidates and remove what the scenario created."""
        for elector in self._electors:
            elector.stop()
        for thread in self._threads:
            thread.join(10)
        if self.real:
            for pod in self._raw(self.core.list_namespaced_pod(self.namespace, _preload_content=False))["items"]:
                pod["metadata"]["finalizers"] = []
                with contextlib.suppress(self._exceptions.ApiException):
                    self.core.replace_namespaced_pod(pod["metadata"]["name"], self.namespace, pod)
            with contextlib.suppress(self._exceptions.ApiException):
                self.core.delete_namespace(self.namespace)

    @staticmethod
    def _raw(response: Any) -> dict[str, Any]:
        try:
            data: dict[str, Any] = json.loads(response.data)
        finally:
            response.release_conn()
        return data


def pod_endpoints(pod: dict[str, Any], address: str) -> Endpoint:
    return Endpoint(address, pod["metadata"]["name"], pod["metadata"]["uid"])


def other_endpoints(count: int, *, base: Iterable[int] = (10, 1)) -> list[Endpoint]:
    """``count`` endpoints of other pods (addresses 10.1.x.y, uids random)."""
    first, second = tuple(base)
    return [
        Endpoint(f"{first}.{second}.{i // 250}.{i % 250 + 1}", f"other-{i}", str(uuid.uuid4())) for i in range(count)
    ]
