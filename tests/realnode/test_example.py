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
from pathlib import Path
from typing import Any

import pytest

from ._cluster import RealNode, namespace
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


@pytest.fixture(scope="module")
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
    listing = json.loads(node.kubectl("get", "pods", "-n", ns, "-o", "json"))
    return [p for p in listing["items"] if not p["metadata"].get("deletionTimestamp")]


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
        comm = real_node.kubectl("exec", "-n", example, name, "--", "cat", "/proc/1/cmdline")
        assert "supervisor" in comm, comm


def test_kubectl_delete_runs_the_plan(real_node: RealNode, example: str) -> None:
    """The drain, the controller's stop and the Lease hand-over, in the
    container log as the timeline and in ``kubectl describe pod`` as Events."""
    name = _pods(real_node, example)[0]["metadata"]["name"]
    logs = subprocess.Popen(
        [
            str(real_node.bin_dir / "kubectl"),
            f"--kubeconfig={real_node.admin_kubeconfig}",
            "logs",
            "-f",
            "-n",
            example,
            name,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
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
