"""examples/kubernetes/rbac.yaml, applied as it is with the real kubectl,
is enough for everything the plugin does; with one verb less the plugin says
what is forbidden and falls back."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, NamedTuple

import pytest
import yaml

from supervisor import Deadline
from tests.cluster import Namespace
from tests.kubernetes.k8s_helpers import KubeTarget, controllers_held_until_the_plugin_looked, harness
from tests.plugins._helpers import LogRecords

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "kubernetes"
ACCOUNT = "example-controller"
LEASE = "example-controller-leader"
POD = "example-controller-0"
SERVICE = "example-controller-webhook"

SECTION = f"""
events: true
endpoint_drain: {{services: [{SERVICE}], propagation_delay: 0s, fallback_delay: 1s}}
lease_release: {{process: controller, leases: [{{name: {LEASE}}}]}}
"""


def _apply(ns: Namespace, documents: list[dict[str, Any]]) -> None:
    ns.plane.kubectl("apply", "-n", ns.name, "-f", "-", input=yaml.safe_dump_all(documents))


def _documents(*names: str) -> list[dict[str, Any]]:
    return [d for name in names for d in yaml.safe_load_all((EXAMPLE / name).read_text()) if d]


def _setup(kube: KubeTarget, tmp_path: Path, rbac: list[dict[str, Any]]) -> KubeTarget:
    """The example's ServiceAccount, Role, RoleBinding and Service; a pod
    behind the Service holding the Lease; the plugin with that account's token."""
    ns = kube.cluster
    _apply(ns, _documents("serviceaccount.yaml", "service.yaml") + rbac)
    container = {
        "name": "main",
        "image": "registry.invalid/none:latest",
        "ports": [{"name": "webhook", "containerPort": 9443}],
    }
    # The Deployment's two replicas: the leader (this pod) and the standby.
    pods = [
        ns.kubelet.run_pod(
            name,
            labels={"app.kubernetes.io/name": "example-controller"},
            ips=[ip],
            service_account=ACCOUNT,
            spec={"containers": [container]},
        )
        for name, ip in ((POD, "10.244.0.7"), ("example-controller-1", "10.244.0.8"))
    ]
    ns.wait_endpoints(SERVICE, pods)
    ns.create_lease(LEASE, f"{POD}_0c1d2e")
    account = ns.service_account_dir(tmp_path / "example-sa", ACCOUNT)
    return KubeTarget(ns, kube.plane, account)


async def _shutdown(kube: KubeTarget, tmp_path: Path) -> tuple[Any, LogRecords]:
    h = harness(kube, tmp_path, POD, SECTION)
    deadline = Deadline(30)
    with LogRecords.capture("kubernetes") as logs:
        await h.background()
        # Where the account may list and watch, the drain sees the flip
        # happen; where it may not, the hold ends with the drain's fallback.
        with controllers_held_until_the_plugin_looked(kube.plane):
            kube.cluster.delete_pod(POD)
            await h.shutdown_started(deadline)
            await h.pre_stop(deadline)
        await h.after_stop(deadline)
    return h, logs


async def test_the_example_role_is_enough(kube: KubeTarget, tmp_path: Path) -> None:
    target = _setup(kube, tmp_path, _documents("rbac.yaml"))
    h, logs = await _shutdown(target, tmp_path)
    assert logs.at(logging.WARNING) == [], logs.messages
    steps = {s.name: s.outcome for s in h.ctx.timeline.steps}
    assert steps["read pod"] == "ok", steps
    assert steps["endpoint drain"] == "ok", steps
    assert kube.cluster.read_lease(LEASE)["spec"]["holderIdentity"] == ""
    reasons = {e["reason"] for e in kube.cluster.list_events()}
    assert {"DrainStarted", "DrainFinished", "LeaseReleased"} <= reasons, reasons
    # The same, in kubectl's words, for the account itself.
    who = f"--as=system:serviceaccount:{kube.namespace}:{ACCOUNT}"
    for verb, resource in (
        ("get", "pods"),
        ("list", "endpointslices.discovery.k8s.io"),
        ("watch", "endpointslices.discovery.k8s.io"),
        ("create", "events.events.k8s.io"),
        ("update", f"leases.coordination.k8s.io/{LEASE}"),
    ):
        assert kube.plane.kubectl("auth", "can-i", verb, resource, "-n", kube.namespace, who).strip() == "yes"
    assert (
        kube.plane.kubectl(
            "auth", "can-i", "update", "leases.coordination.k8s.io/other", "-n", kube.namespace, who, check=False
        ).strip()
        == "no"
    )


def _without(group: str, resource: str, verb: str) -> list[dict[str, Any]]:
    documents = _documents("rbac.yaml")
    for document in documents:
        for rule in document.get("rules") or []:
            if group in rule["apiGroups"] and resource in rule["resources"]:
                rule["verbs"] = [v for v in rule["verbs"] if v != verb]
        if document.get("rules") is not None:
            document["rules"] = [r for r in document["rules"] if r["verbs"]]
    return documents


class Removed(NamedTuple):
    """One verb taken out of the example Role."""

    group: str
    resource: str
    verb: str

    @property
    def expected(self) -> str:
        """How the server's 403 names it."""
        return f'cannot {self.verb} resource "{self.resource}"'


@pytest.mark.parametrize(
    "removed",
    [
        Removed("", "pods", "get"),
        Removed("discovery.k8s.io", "endpointslices", "list"),
        Removed("discovery.k8s.io", "endpointslices", "watch"),
        Removed("coordination.k8s.io", "leases", "update"),
        Removed("events.k8s.io", "events", "create"),
    ],
    ids=lambda r: f"{r.resource}-{r.verb}",
)
async def test_one_verb_less_is_named_and_falls_back(kube: KubeTarget, tmp_path: Path, removed: Removed) -> None:
    target = _setup(kube, tmp_path, _without(removed.group, removed.resource, removed.verb))
    h, logs = await _shutdown(target, tmp_path)
    warnings = logs.at(logging.WARNING)
    named = [m for m in warnings if "HTTP 403" in m and removed.expected in m]
    assert named, warnings
    steps = {s.name: s.outcome for s in h.ctx.timeline.steps}
    if (removed.resource, removed.verb) in (("endpointslices", "list"), ("endpointslices", "watch"), ("pods", "get")):
        assert any("falls back to a fixed 1.0 s wait" in m for m in warnings), warnings
        assert steps.get("fallback delay") == "ok", steps
    if removed.resource == "leases":
        assert kube.cluster.read_lease(LEASE)["spec"]["holderIdentity"] == f"{POD}_0c1d2e"
