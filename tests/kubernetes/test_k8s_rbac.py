"""examples/kubernetes/rbac.yaml, applied as it is with the real kubectl,
is enough for everything the plugin does; with one verb less the plugin says
what is forbidden and falls back."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from supervisor import Deadline
from tests.kubernetes.k8s_helpers import EXAMPLE_ACCOUNT as ACCOUNT
from tests.kubernetes.k8s_helpers import EXAMPLE_LEASE as LEASE
from tests.kubernetes.k8s_helpers import EXAMPLE_POD as POD
from tests.kubernetes.k8s_helpers import EXAMPLE_SERVICE as SERVICE
from tests.kubernetes.k8s_helpers import (
    KubeTarget,
    controllers_held_until_the_plugin_looked,
    example_documents,
    example_rbac_without,
    example_setup,
    harness,
)
from tests.plugins._helpers import LogRecords

SECTION = f"""
events: true
endpoint_drain: {{services: [{SERVICE}], propagation_delay: 0s, fallback_delay: 1s}}
lease_release: {{process: controller, leases: [{{name: {LEASE}}}]}}
"""


async def _shutdown(kube: KubeTarget, tmp_path: Path, section: str = SECTION) -> tuple[Any, LogRecords]:
    h = harness(kube, tmp_path, POD, section)
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
    target = example_setup(kube, tmp_path, example_documents("rbac.yaml"))
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
    target = example_setup(kube, tmp_path, example_rbac_without(removed.group, removed.resource, removed.verb))
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


SERVICES_RULE = {"apiGroups": [""], "resources": ["services"], "verbs": ["list", "watch"]}


@pytest.mark.parametrize("granted", [True, False], ids=["services-granted", "services-not-granted"])
async def test_without_named_services_the_drain_needs_services_list_and_watch(
    kube: KubeTarget, tmp_path: Path, granted: bool
) -> None:
    """No ``endpoint_drain.services``: with list/watch on Services (what
    rbac.yaml's comment says to add) the plugin finds the Services that
    select the pod and the drain reads only their slices; without, the
    server's 403 is named and the drain reads every slice, as it did."""
    rbac = example_documents("rbac.yaml")
    if granted:
        (role,) = [d for d in rbac if d["kind"] == "Role"]
        role["rules"].append(SERVICES_RULE)
    target = example_setup(kube, tmp_path, rbac)
    section = SECTION.replace(f"services: [{SERVICE}], ", "")
    h, logs = await _shutdown(target, tmp_path, section)
    warnings = logs.at(logging.WARNING)
    steps = {s.name: s.outcome for s in h.ctx.timeline.steps}
    assert steps["endpoint drain"] == "ok", steps
    if granted:
        assert warnings == [], warnings
        assert f"Services that select this pod: {SERVICE}" in logs.messages, logs.messages
    else:
        assert any("HTTP 403" in m and 'cannot list resource "services"' in m for m in warnings), warnings
        assert any("reads every EndpointSlice" in m for m in warnings), warnings
