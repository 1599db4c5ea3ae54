"""examples/kubernetes on the real node, applied as users apply it (only the
image name replaced): the project's image with the supervisor as PID 1, the
ServiceAccount token the real kubelet projects, the probes on the
supervisor's /livez and /readyz, the RBAC of rbac.yaml.  What a user sees:
the pods Ready, ``kubectl exec POD -- supervisor status``, and at
``kubectl delete`` the shutdown timeline in ``kubectl logs`` and the
plugin's Events in ``kubectl describe pod``."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from ._cluster import NODE_NAME, RealNode, namespace
from ._images import load_example_image

pytestmark = [pytest.mark.xdist_group("real-node"), pytest.mark.slow]

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "kubernetes"
EXAMPLE_IMAGE_IN_MANIFEST = "registry.example.com/example-controller:1.0.0"
# What the controller itself needs (a kubebuilder project ships it in
# config/rbac): its leader Lease and the ConfigMaps it reconciles.  The
# example's rbac.yaml is the supervisor's share only.
CONTROLLER_RBAC = """
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: example-controller-manager}
rules:
  - apiGroups: [coordination.k8s.io]
    resources: [leases]
    verbs: [get, create, update]
  - apiGroups: [""]
    resources: [configmaps]
    verbs: [get, list, watch]
  - apiGroups: ["", events.k8s.io]
    resources: [events]
    verbs: [create, patch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: example-controller-manager}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: example-controller-manager}
subjects: [{kind: ServiceAccount, name: example-controller}]
"""


# Session scope, not module: xdist may interleave these tests with the
# node's other tests, and a module fixture would then be made again (the
# image import alone takes minutes on a busy machine).
@pytest.fixture(scope="session")
def example(real_node: RealNode) -> Iterator[str]:
    """The example applied in a namespace of its own, both replicas Ready."""
    image = load_example_image(real_node)
    manifests = real_node.kubectl("kustomize", str(EXAMPLE))
    assert EXAMPLE_IMAGE_IN_MANIFEST in manifests
    with namespace(real_node, "example") as ns:
        real_node.kubectl("apply", "-n", ns, "-f", "-", input=CONTROLLER_RBAC)
        real_node.kubectl("apply", "-n", ns, "-f", "-", input=manifests.replace(EXAMPLE_IMAGE_IN_MANIFEST, image))
        real_node.kubectl("rollout", "status", "-n", ns, "deployment/example-controller", "--timeout=180s")
        yield ns


def _pods(node: RealNode, ns: str) -> list[dict[str, Any]]:
    """The Deployment's pods that are not being deleted."""
    listing = json.loads(node.kubectl("get", "pods", "-n", ns, "-o", "json"))
    return [
        p
        for p in listing["items"]
        if not p["metadata"].get("deletionTimestamp") and "pod-template-hash" in p["metadata"].get("labels", {})
    ]


def _story(node: RealNode, ns: str) -> str:
    """The pods and Events of ``ns``, for a failure's message."""
    pods = node.kubectl("get", "pods", "-n", ns, "-o", "wide", check=False)
    events = node.kubectl("get", "events", "-n", ns, "--sort-by=.lastTimestamp", check=False)
    return f"{pods}\n{events}"


def _follow_logs(node: RealNode, ns: str, pod: str) -> subprocess.Popen[str]:
    """``kubectl logs -f POD``: the container's output until it exits."""
    return subprocess.Popen(
        node.kubectl_argv("logs", "-f", "-n", ns, pod),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def test_the_example_runs_with_the_supervisor_as_pid_1(real_node: RealNode, example: str) -> None:
    pods = _pods(real_node, example)
    assert len(pods) == 2
    for pod in pods:
        (status,) = pod["status"]["containerStatuses"]
        assert status["ready"] and status["restartCount"] == 0, status
        name = pod["metadata"]["name"]
        # The kubelet's probes are the supervisor's own endpoints.
        spec = pod["spec"]["containers"][0]
        assert spec["readinessProbe"]["httpGet"]["path"] == "/readyz"
        assert spec["livenessProbe"]["httpGet"]["path"] == "/livez"
        out = real_node.kubectl("exec", "-n", example, name, "--", "supervisor", "status")
        assert "controller" in out and "running" in out, out
        # The controller's output, kept by the supervisor, as docs/control.md shows.
        logs = real_node.kubectl("exec", "-n", example, name, "--", "supervisor", "logs", "controller")
        assert "controller" in logs and logs.count("\n") >= 1, logs
        comm = real_node.kubectl("exec", "-n", example, name, "--", "cat", "/proc/1/cmdline")
        assert "supervisor" in comm, comm


def test_kubectl_delete_runs_the_plan(real_node: RealNode, example: str) -> None:
    """The drain, the controller's stop and the Lease hand-over, in the
    container log as the timeline and in ``kubectl describe pod`` as Events."""
    name = _pods(real_node, example)[0]["metadata"]["name"]
    logs = _follow_logs(real_node, example, name)
    try:
        real_node.kubectl("delete", "pod", "-n", example, name, "--wait=false")
        described = ""
        deadline = time.monotonic() + 60
        # The pod stays while the supervisor drains (propagation_delay 5 s):
        # its Events are there to be described meanwhile.
        while "DrainFinished" not in described:
            assert time.monotonic() < deadline, described
            described = real_node.kubectl("describe", "pod", "-n", example, name, check=False)
            time.sleep(0.2)
        out, _ = logs.communicate(timeout=90)
    finally:
        if logs.poll() is None:
            logs.kill()
            logs.wait()
    assert "DrainStarted" in described, described
    timeline = [json.loads(line) for line in out.splitlines() if line.startswith("{") and "shutdown timeline" in line]
    assert timeline, out
    steps = json.dumps(timeline[0])
    assert "endpoint" in steps and "lease" in steps, steps
    real_node.kubectl("wait", "-n", example, "--for=delete", f"pod/{name}", "--timeout=90s")
    real_node.kubectl("rollout", "status", "-n", example, "deployment/example-controller", "--timeout=180s")


def _micro_time(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def _lease(node: RealNode, ns: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(node.kubectl("get", "lease", "-n", ns, "example-controller-leader", "-o", "json"))
    return data


def test_deleting_the_leader_hands_the_lease_over_within_the_retry_period(real_node: RealNode, example: str) -> None:
    """The supervisor releases the leader's Lease once the controller has
    stopped; another replica (controller-runtime's RetryPeriod, 2 s) leads a
    moment later, not after the LeaseDuration (15 s) a crashed leader costs."""
    pods = {p["metadata"]["name"] for p in _pods(real_node, example)}
    deadline = time.monotonic() + 60
    while (holder := _lease(real_node, example)["spec"].get("holderIdentity", "")).split("_")[0] not in pods:
        assert time.monotonic() < deadline, f"no pod of {pods} leads: {holder!r}"
        time.sleep(0.2)
    leader = holder.split("_")[0]
    real_node.kubectl("delete", "pod", "-n", example, leader, "--wait=false")
    deadline = time.monotonic() + 90
    # The standby, or the leader's replacement if the Deployment's new pod
    # happens to retry first: whichever, another pod leads.
    while (lease := _lease(real_node, example))["spec"].get("holderIdentity", "").split("_")[0] in ("", leader):
        assert time.monotonic() < deadline, f"no other pod led: {lease}\n{_story(real_node, example)}"
        time.sleep(0.2)
    acquired = _micro_time(lease["spec"]["acquireTime"])
    events = json.loads(real_node.kubectl("get", "events", "-n", example, "-o", "json"))["items"]
    (released,) = [
        _micro_time(e.get("eventTime") or e["firstTimestamp"])
        for e in events
        if e["reason"] == "LeaseReleased" and e["involvedObject"]["name"] == leader
    ]
    # The event is posted just after the release: the standby can win the
    # race by a moment.
    assert -1 < acquired - released < 8, (released, acquired, _story(real_node, example))
    real_node.kubectl("rollout", "status", "-n", example, "deployment/example-controller", "--timeout=180s")


def test_a_grace_period_shorter_than_the_drain_ends_before_the_sigkill(real_node: RealNode, example: str) -> None:
    """``kubectl delete --grace-period=4`` against a drain that wants 5 s of
    propagation alone: the plugin shortens the deadline to the SIGKILL, the
    drain has no time to look at the EndpointSlices, the controller is
    stopped and the supervisor exits on its own; the Events say the drain
    never looked (not that it timed out: it did not wait for anything)."""
    name = _pods(real_node, example)[0]["metadata"]["name"]
    logs = _follow_logs(real_node, example, name)
    try:
        real_node.kubectl("delete", "pod", "-n", example, name, "--grace-period=4", "--wait=false")
        out, _ = logs.communicate(timeout=90)
    finally:
        if logs.poll() is None:
            logs.kill()
            logs.wait()
    lines = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert any("deadline shortened" in line.get("message", "") for line in lines), out
    # The last word is the supervisor's own: it was not SIGKILLed mid-plan.
    assert lines[-1]["message"].startswith("exiting with status"), lines[-1]
    events = json.loads(
        real_node.kubectl("get", "events", "-n", example, f"--field-selector=involvedObject.name={name}", "-o", "json")
    )["items"]
    reasons = {e["reason"] for e in events}
    assert {"DrainStarted", "DrainNotStarted"} <= reasons, reasons
    assert "DrainTimedOut" not in reasons, reasons
    real_node.kubectl("rollout", "status", "-n", example, "deployment/example-controller", "--timeout=180s")


def test_a_liveness_restart_skips_the_drain(real_node: RealNode, example: str) -> None:
    """A container the kubelet restarts because its liveness probe failed
    gets SIGTERM with no deletionTimestamp on its pod: it stays in its
    Services, so the plugin skips the endpoint drain and says why; the pod
    is the same one afterwards, its container restarted."""
    deployment = json.loads(real_node.kubectl("get", "deployment", "-n", example, "example-controller", "-o", "json"))
    template = deployment["spec"]["template"]
    container = template["spec"]["containers"][0]
    # The example's pod, but a liveness probe that asks for a path the
    # supervisor does not serve: the kubelet restarts the container.
    container["livenessProbe"] = {
        "httpGet": {"path": "/no-such-path", "port": "supervisor"},
        "initialDelaySeconds": 5,
        "periodSeconds": 2,
        "failureThreshold": 1,
    }
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        # Not the Deployment's labels: its ReplicaSet would adopt the pod.
        "metadata": {"name": "liveness", "labels": {"test": "liveness"}},
        "spec": template["spec"],
    }
    real_node.kubectl("apply", "-n", example, "-f", "-", input=json.dumps(pod))
    try:
        deadline = time.monotonic() + 180
        while True:
            status = json.loads(real_node.kubectl("get", "pod", "-n", example, "liveness", "-o", "json"))
            statuses = status["status"].get("containerStatuses") or [{}]
            if statuses[0].get("restartCount", 0) >= 1:
                break
            assert time.monotonic() < deadline, status["status"]
            time.sleep(0.5)
        assert not status["metadata"].get("deletionTimestamp")
        previous = real_node.kubectl("logs", "-n", example, "liveness", "--previous")
        assert "skipping the endpoint drain" in previous, previous
        described = real_node.kubectl("describe", "pod", "-n", example, "liveness")
        assert "Liveness probe failed" in described, described
    finally:
        real_node.kubectl("delete", "pod", "-n", example, "liveness", "--grace-period=1", "--wait=false", check=False)


def test_kubectl_drain_evicts_one_pod_as_the_budget_allows(real_node: RealNode, example: str) -> None:
    """``kubectl drain NODE`` with a PodDisruptionBudget of minAvailable 1:
    the Eviction API lets one pod go -- a deletion with a deletionTimestamp,
    so the plugin drains it as on ``kubectl delete`` -- and refuses the other
    while the first one's replacement cannot be scheduled (the only node is
    cordoned)."""
    selector = "app.kubernetes.io/name=example-controller"
    pdb = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "example-controller"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app.kubernetes.io/name": "example-controller"}}},
    }
    real_node.kubectl("apply", "-n", example, "-f", "-", input=json.dumps(pdb))
    before = {p["metadata"]["name"] for p in _pods(real_node, example)}
    try:
        deadline = time.monotonic() + 60
        while (
            json.loads(real_node.kubectl("get", "pdb", "-n", example, "example-controller", "-o", "json"))
            .get("status", {})
            .get("disruptionsAllowed")
            != 1
        ):
            assert time.monotonic() < deadline, "the disruption controller never allowed one disruption"
            time.sleep(0.2)
        drain = subprocess.run(
            real_node.kubectl_argv(
                *("drain", NODE_NAME, "--ignore-daemonsets", "--delete-emptydir-data"),
                *(f"--pod-selector={selector}", "--timeout=25s"),
            ),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert drain.returncode != 0, drain.stdout
        assert "disruption budget" in drain.stderr, drain.stderr
        remaining = {p["metadata"]["name"] for p in _pods(real_node, example)} & before
        assert len(remaining) == 1, (before, remaining)
        (evicted,) = before - remaining
        deadline = time.monotonic() + 60
        reasons: set[str] = set()
        while "DrainFinished" not in reasons:
            assert time.monotonic() < deadline, reasons
            events = real_node.kubectl(
                "get", "events", "-n", example, f"--field-selector=involvedObject.name={evicted}", "-o", "json"
            )
            reasons = {e["reason"] for e in json.loads(events)["items"]}
            time.sleep(0.5)
        assert "DrainStarted" in reasons
    finally:
        real_node.kubectl("uncordon", NODE_NAME)
        real_node.kubectl("delete", "pdb", "-n", example, "example-controller", check=False)
    real_node.kubectl("rollout", "status", "-n", example, "deployment/example-controller", "--timeout=180s")
