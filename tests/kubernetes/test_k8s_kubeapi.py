"""The test API server behaves like the real one where the plugin depends on
it.  Run with KUBECONFIG set, the same checks hold against a real cluster
(those needing fault injection are skipped there)."""

from __future__ import annotations

import json
import ssl
import threading
import time
import urllib.error
import urllib.request
from typing import Any

import pytest
from kubernetes import watch
from kubernetes.client.exceptions import ApiException

from tests.kubeapi import Endpoint, KubeAPIServer, micro_time
from tests.kubernetes.k8s_helpers import KubeTarget


def _raw(response: Any) -> dict[str, Any]:
    try:
        return json.loads(response.data)  # type: ignore[no-any-return]
    finally:
        response.release_conn()


def test_versions_increase_and_stale_writes_conflict(kube: KubeTarget) -> None:
    cluster = kube.cluster
    first = cluster.create_lease("l", "a")
    stale = json.loads(json.dumps(first))
    first["spec"]["holderIdentity"] = "b"
    second = cluster.coordination.replace_namespaced_lease("l", kube.namespace, first)
    assert int(second.metadata.resource_version) > int(first["metadata"]["resourceVersion"])
    stale["spec"]["holderIdentity"] = "c"
    with pytest.raises(ApiException) as caught:
        cluster.coordination.replace_namespaced_lease("l", kube.namespace, stale)
    assert caught.value.status == 409
    body = json.loads(caught.value.body)
    assert (body["kind"], body["reason"], body["code"]) == ("Status", "Conflict", 409)
    assert cluster.read_lease("l")["spec"]["holderIdentity"] == "b"


def test_micro_time_needs_six_fractional_digits(kube: KubeTarget) -> None:
    cluster = kube.cluster
    lease = cluster.create_lease("l", "a")
    lease["spec"]["renewTime"] = "2026-01-01T00:00:00Z"
    with pytest.raises(ApiException) as caught:
        cluster.coordination.replace_namespaced_lease("l", kube.namespace, lease, _preload_content=False)
    assert caught.value.status == 400
    lease["spec"]["renewTime"] = micro_time()
    cluster.coordination.replace_namespaced_lease("l", kube.namespace, lease, _preload_content=False)


def test_label_and_field_selectors(kube: KubeTarget) -> None:
    cluster = kube.cluster
    cluster.create_service("web", [Endpoint("10.0.0.1")])
    cluster.create_service("admin", [Endpoint("10.0.0.2")])
    cluster.create_service("other", [Endpoint("10.0.0.3")])

    def names(**query: str) -> list[str]:
        page = _raw(cluster.discovery.list_namespaced_endpoint_slice(kube.namespace, _preload_content=False, **query))
        return sorted(i["metadata"]["labels"]["kubernetes.io/service-name"] for i in page["items"])

    assert names(label_selector="kubernetes.io/service-name in (web,admin)") == ["admin", "web"]
    assert names(label_selector="kubernetes.io/service-name!=web") == ["admin", "other"]
    assert names(label_selector="kubernetes.io/service-name notin (web),!missing") == ["admin", "other"]
    one = cluster.list_slices()[0]["metadata"]["name"]
    assert len(names(field_selector=f"metadata.name={one}")) == 1
    with pytest.raises(ApiException) as caught:
        names(field_selector="spec.nope=1")
    assert caught.value.status == 400


def test_watch_from_a_version_bookmarks_and_timeout(fake: KubeAPIServer, kube: KubeTarget) -> None:
    cluster = kube.cluster
    fake.options.bookmark_interval = 0.2
    cluster.create_service("web", [Endpoint("10.0.0.1", "p", "uid-1")])
    listed = _raw(cluster.discovery.list_namespaced_endpoint_slice(kube.namespace, _preload_content=False))
    version = listed["metadata"]["resourceVersion"]
    flip = threading.Timer(0.5, cluster.set_pod_endpoints, args=("uid-1",))
    flip.start()
    started = time.monotonic()
    kinds = [
        event["type"]
        for event in watch.Watch(return_type=object).stream(
            cluster.discovery.list_namespaced_endpoint_slice,
            kube.namespace,
            resource_version=version,
            allow_watch_bookmarks=True,
            timeout_seconds=2,
        )
    ]
    flip.join()
    assert 1.9 < time.monotonic() - started < 5, "timeoutSeconds not honoured"
    assert "MODIFIED" in kinds and "BOOKMARK" in kinds, kinds
    assert "ADDED" not in kinds, "a watch from a version must not replay the state"


def test_too_old_version_is_410_gone(fake: KubeAPIServer, kube: KubeTarget) -> None:
    cluster = kube.cluster
    cluster.create_service("web", [Endpoint("10.0.0.1")])
    old = str(fake.store.resource_version)
    cluster.create_service("admin", [Endpoint("10.0.0.2")])
    fake.store.compact()
    with pytest.raises(ApiException) as caught:
        for _ in watch.Watch().stream(
            cluster.discovery.list_namespaced_endpoint_slice,
            kube.namespace,
            resource_version=old,
            timeout_seconds=2,
        ):
            pass
    assert caught.value.status == 410


def test_pod_deletion_is_graceful(kube: KubeTarget) -> None:
    cluster = kube.cluster
    cluster.create_pod("p", grace=30)
    deleted = cluster.delete_pod("p", grace=12)
    meta = cluster.read_pod("p")["metadata"]
    assert meta["deletionGracePeriodSeconds"] == 12
    assert meta["deletionTimestamp"] == deleted["metadata"]["deletionTimestamp"]


def test_bearer_token_is_required(fake: KubeAPIServer, kube: KubeTarget) -> None:
    context = ssl.create_default_context(cadata=fake.ca_pem.decode())
    url = f"{fake.url}/api/v1/namespaces/{kube.namespace}/pods"
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(url, context=context, timeout=5)
    assert caught.value.code == 401
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {fake.token}"})
    with urllib.request.urlopen(request, context=context, timeout=5) as response:
        assert json.load(response)["kind"] == "PodList"
