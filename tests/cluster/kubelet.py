"""The tests' kubelet: a Node, Pods bound to it, their status, their end.

No containers run.  What a kubelet writes to the API is written the same way
here, so the rest of the control plane (the EndpointSlice controller above
all) reacts as it does on a cluster:

    kubelet = Kubelet(api_client, namespace)      # the Node exists from now on
    pod = kubelet.run_pod("web-0", labels={"app": "web"}, ips=["10.244.0.7"])
    kubelet.set_ready("web-0", False)             # readiness probe failing
    kubelet.delete_pod("web-0", grace=10)         # what kubectl delete does
    kubelet.finish_pod("web-0")                   # containers gone: final delete

``run_pod`` creates the Pod with ``spec.nodeName`` set (bound, as the
scheduler would have) and then writes ``status`` through the ``/status``
subresource: phase Running, ``podIP``/``podIPs`` and the ``Ready`` and
``ContainersReady`` conditions.  A graceful delete makes the API server set
``deletionTimestamp``/``deletionGracePeriodSeconds`` and keep the Pod, because
it is bound to a node: only the kubelet's final delete with grace 0 removes
it.  All objects are plain JSON dicts, as the API returns them.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Mapping, Sequence
from typing import Any, TypedDict, Unpack

__all__ = ["NODE_NAME", "Kubelet", "PodFields"]

NODE_NAME = "pid1-test-node"


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Kubelet:
    """A kubelet for one namespace's pods on node ``node``."""

    def __init__(self, api_client: Any, namespace: str, node: str = NODE_NAME) -> None:
        from kubernetes import client

        self.core: Any = client.CoreV1Api(api_client)
        self._exceptions: Any = client.exceptions
        self.namespace = namespace
        self.node = node
        self.ensure_node()

    def ensure_node(self) -> dict[str, Any]:
        """Register the Node (once per cluster) and report it Ready."""
        try:
            return _raw(self.core.read_node(self.node, _preload_content=False))
        except self._exceptions.ApiException as exc:
            if exc.status != 404:
                raise
        body = {"metadata": {"name": self.node, "labels": {"kubernetes.io/hostname": self.node}}}
        try:
            node = _raw(self.core.create_node(body, _preload_content=False))
        except self._exceptions.ApiException as exc:
            if exc.status != 409:  # another worker's kubelet registered it first
                raise
            return _raw(self.core.read_node(self.node, _preload_content=False))
        now = _now()
        node["status"] = {
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "lastHeartbeatTime": now,
                    "lastTransitionTime": now,
                    "message": "kubelet is posting ready status",
                },
            ],
            "addresses": [{"type": "Hostname", "address": self.node}],
        }
        return _raw(self.core.replace_node_status(self.node, node, _preload_content=False))

    def run_pod(
        self, name: str, *, ips: Sequence[str] = (), ready: bool = True, **pod: Unpack[PodFields]
    ) -> dict[str, Any]:
        """Create the Pod (``pod``: its object's fields) bound to this node
        and report it running with ``ips``; ``ready`` sets its Ready condition."""
        body = _pod_body(name, self.node, **pod)
        created = _raw(self.core.create_namespaced_pod(self.namespace, body, _preload_content=False))
        return self.set_status(created, ips=ips, ready=ready)

    def set_status(self, pod: dict[str, Any], *, ips: Sequence[str], ready: bool) -> dict[str, Any]:
        """Write the Pod's status as a kubelet's status manager does."""
        now = _now()
        state = "True" if ready else "False"
        pod["status"] = {
            "phase": "Running",
            "hostIP": "127.0.0.1",
            "hostIPs": [{"ip": "127.0.0.1"}],
            "startTime": now,
            "conditions": [
                {"type": "Initialized", "status": "True", "lastTransitionTime": now},
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": now},
                {"type": "ContainersReady", "status": state, "lastTransitionTime": now},
                {"type": "Ready", "status": state, "lastTransitionTime": now},
            ],
            "containerStatuses": [
                {
                    "name": "main",
                    "image": "registry.invalid/none:latest",
                    "imageID": "",
                    "ready": ready,
                    "restartCount": 0,
                    "started": True,
                    "state": {"running": {"startedAt": now}},
                }
            ],
        }
        if ips:
            pod["status"]["podIP"] = ips[0]
            pod["status"]["podIPs"] = [{"ip": ip} for ip in ips]
        name = pod["metadata"]["name"]
        return _raw(self.core.replace_namespaced_pod_status(name, self.namespace, pod, _preload_content=False))

    def set_ready(self, name: str, ready: bool) -> dict[str, Any]:
        """Flip the Ready condition (a readiness probe passing or failing)."""
        pod = self.read_pod(name)
        ips = [entry["ip"] for entry in pod.get("status", {}).get("podIPs") or []]
        return self.set_status(pod, ips=ips, ready=ready)

    def read_pod(self, name: str) -> dict[str, Any]:
        return _raw(self.core.read_namespaced_pod(name, self.namespace, _preload_content=False))

    def delete_pod(self, name: str, *, grace: int | None = None) -> dict[str, Any]:
        """A graceful delete (``kubectl delete pod``): returns the Pod as the
        server left it, with deletionTimestamp and deletionGracePeriodSeconds."""
        return _raw(
            self.core.delete_namespaced_pod(name, self.namespace, grace_period_seconds=grace, _preload_content=False)
        )

    def finish_pod(self, name: str) -> None:
        """The kubelet's final delete once the containers are gone (grace 0);
        a Pod already gone is fine."""
        try:
            self.core.delete_namespaced_pod(name, self.namespace, grace_period_seconds=0, _preload_content=False)
        except self._exceptions.ApiException as exc:
            if exc.status != 404:
                raise

    def finish_all(self) -> None:
        """Final-delete every Pod of the namespace on this node (test cleanup)."""
        pods = _raw(
            self.core.list_namespaced_pod(
                self.namespace, field_selector=f"spec.nodeName={self.node}", _preload_content=False
            )
        )
        for pod in pods["items"]:
            self.finish_pod(pod["metadata"]["name"])


class PodFields(TypedDict, total=False):
    """What ``Kubelet.run_pod`` writes into the Pod object (its status is
    the kubelet's own, from ``ips`` and ``ready``)."""

    labels: Mapping[str, str] | None
    grace: int  # terminationGracePeriodSeconds, default 30
    service_account: str | None
    spec: Mapping[str, Any] | None  # merged over the minimal spec


def _pod_body(name: str, node: str, **pod: Unpack[PodFields]) -> dict[str, Any]:
    pod_spec: dict[str, Any] = {
        "nodeName": node,
        "terminationGracePeriodSeconds": pod.get("grace", 30),
        "containers": [{"name": "main", "image": "registry.invalid/none:latest"}],
        "automountServiceAccountToken": False,
        **(pod.get("spec") or {}),
    }
    service_account = pod.get("service_account")
    if service_account:
        pod_spec["serviceAccountName"] = service_account
    return {"metadata": {"name": name, "labels": dict(pod.get("labels") or {})}, "spec": pod_spec}


def _raw(response: Any) -> dict[str, Any]:
    try:
        data: dict[str, Any] = json.loads(response.data)
    finally:
        response.release_conn()
    return data
