"""What the plugin relies on in the real API server's behaviour, checked
against it: if a Kubernetes upgrade changes one of these, this file says
which before the plugin's own tests fail in a puzzling way."""

from __future__ import annotations

import json

import pytest
from kubernetes.client.exceptions import ApiException

from tests.cluster import micro_time
from tests.kubernetes.k8s_helpers import KubeTarget


def test_stale_lease_writes_conflict(kube: KubeTarget) -> None:
    ns = kube.cluster
    first = ns.create_lease("l", "a")
    stale = json.loads(json.dumps(first))
    first["spec"]["holderIdentity"] = "b"
    second = ns.replace_lease(first)
    assert int(second["metadata"]["resourceVersion"]) > int(first["metadata"]["resourceVersion"])
    stale["spec"]["holderIdentity"] = "c"
    with pytest.raises(ApiException) as caught:
        ns.replace_lease(stale)
    assert caught.value.status == 409
    body = json.loads(caught.value.body)
    assert (body["kind"], body["reason"], body["code"]) == ("Status", "Conflict", 409)
    assert ns.read_lease("l")["spec"]["holderIdentity"] == "b"


def test_lease_update_needs_a_resource_version(kube: KubeTarget) -> None:
    ns = kube.cluster
    lease = ns.create_lease("l", "a")
    del lease["metadata"]["resourceVersion"]
    with pytest.raises(ApiException) as caught:
        ns.replace_lease(lease)
    assert caught.value.status == 422, caught.value.body


def test_micro_time_needs_six_fractional_digits(kube: KubeTarget) -> None:
    ns = kube.cluster
    lease = ns.create_lease("l", "a")
    lease["spec"]["renewTime"] = "2026-01-01T00:00:00Z"
    with pytest.raises(ApiException) as caught:
        ns.replace_lease(lease)
    assert caught.value.status == 400
    lease["spec"]["renewTime"] = micro_time()
    ns.replace_lease(lease)


def test_graceful_deletion_of_a_bound_pod_keeps_it_until_the_kubelet_finishes(kube: KubeTarget) -> None:
    ns = kube.cluster
    ns.run_pod("web-0", grace=30)
    deleted = ns.delete_pod("web-0", grace=7)
    meta = deleted["metadata"]
    assert meta["deletionGracePeriodSeconds"] == 7
    # Whole seconds: the fraction the plugin has to account for.
    assert meta["deletionTimestamp"].endswith("Z") and "." not in meta["deletionTimestamp"]
    assert ns.kubelet.read_pod("web-0")["metadata"]["deletionTimestamp"] == meta["deletionTimestamp"]
    ns.kubelet.finish_pod("web-0")
    with pytest.raises(ApiException) as caught:
        ns.kubelet.read_pod("web-0")
    assert caught.value.status == 404


def test_endpoint_conditions_through_a_pods_life(kube: KubeTarget) -> None:
    """Ready → (readiness fails) not ready, not serving → (ready again,
    then deleted) terminating, serving, not ready → gone with the pod."""
    ns = kube.cluster
    pod = ns.run_pod("web-0", ips=["10.244.0.7"], labels={"app": "web"})
    ns.create_service("web", {"app": "web"})
    ns.wait_endpoints("web", [pod])
    uid = pod["metadata"]["uid"]

    def conditions() -> dict[str, bool] | None:
        found = ns.pod_endpoints(uid, "web")
        return found[0]["conditions"] if found else None

    def wait_for(expected: dict[str, bool] | None) -> None:
        import time

        stop = time.monotonic() + 30
        while conditions() != expected:
            assert time.monotonic() < stop, (conditions(), expected)
            time.sleep(0.05)

    wait_for({"ready": True, "serving": True, "terminating": False})
    ns.kubelet.set_ready("web-0", False)
    wait_for({"ready": False, "serving": False, "terminating": False})
    ns.kubelet.set_ready("web-0", True)
    wait_for({"ready": True, "serving": True, "terminating": False})
    ns.delete_pod("web-0")
    wait_for({"ready": False, "serving": True, "terminating": True})
    ns.kubelet.finish_pod("web-0")
    wait_for(None)
