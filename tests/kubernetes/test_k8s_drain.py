"""The endpoint drain and the pod deadline, hook by hook, against a real
HTTPS API server (the test server, or a cluster when KUBECONFIG is set)."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import trio

from supervisor import Deadline
from tests.kubeapi import Endpoint, KubeAPIServer, other_endpoints, pod_endpoints
from tests.kubernetes.k8s_helpers import KubeTarget, harness
from tests.plugins._helpers import LogRecords


def _step(ctx: object, name: str) -> object:
    steps = [s for s in ctx.timeline.steps if s.name == name]  # type: ignore[attr-defined]
    assert steps, f"no timeline step {name!r}"
    return steps[-1]


async def test_drain_ends_after_the_flip_and_the_propagation_delay(kube: KubeTarget, tmp_path: Path) -> None:
    cluster = kube.cluster
    pod = cluster.create_pod("web-0", grace=30, ip="10.0.0.7")
    cluster.create_service("web", [pod_endpoints(pod, "10.0.0.7"), *other_endpoints(3)])
    cluster.create_service("admin", [pod_endpoints(pod, "10.0.0.7")])
    cluster.create_service("unrelated", other_endpoints(2, base=(10, 2)))
    h = harness(
        kube,
        tmp_path,
        "web-0",
        """
        endpoint_drain: {propagation_delay: 0.5s, fallback_delay: 20s, progress_interval: 0.2s}
        """,
    )
    deletion = cluster.delete_pod_and_flip("web-0", flip_after=1.0)
    deadline = Deadline(30)
    with LogRecords.capture("kubernetes") as logs:
        await h.shutdown_started(deadline)
        ended = await h.pre_stop(deadline)
    flipped = deletion.wait_flipped()
    assert ended >= flipped + 0.5, "the drain ended before the endpoints flipped + propagation_delay"
    assert ended < flipped + 0.5 + 5, "the drain went on long after the flip"
    assert any("2 of 2 slices still route to this pod" in m for m in logs.messages), logs.messages
    assert _step(h.ctx, "endpoint drain").outcome == "ok"  # type: ignore[attr-defined]
    assert _step(h.ctx, "propagation delay").outcome == "ok"  # type: ignore[attr-defined]


async def test_no_deletion_timestamp_skips_the_drain(kube: KubeTarget, tmp_path: Path) -> None:
    cluster = kube.cluster
    pod = cluster.create_pod("web-0", ip="10.0.0.7")
    cluster.create_service("web", [pod_endpoints(pod, "10.0.0.7")])
    h = harness(kube, tmp_path, "web-0", "endpoint_drain: {fallback_delay: 20s, propagation_delay: 5s}")
    deadline = Deadline(30)
    started = time.monotonic()
    with LogRecords.capture("kubernetes") as logs:
        await h.shutdown_started(deadline, reason="SIGTERM")
        await h.pre_stop(deadline)
    assert time.monotonic() - started < 3, "a pod that is not being deleted waited anyway"
    assert any("skipping the endpoint drain" in m for m in logs.messages), logs.messages
    assert _step(h.ctx, "endpoint drain").outcome == "skipped"  # type: ignore[attr-defined]
    assert deadline.reasons == [], "the deadline moved although the pod is not being deleted"


async def test_pod_not_in_any_slice_has_nothing_to_drain(kube: KubeTarget, tmp_path: Path) -> None:
    cluster = kube.cluster
    cluster.create_pod("batch-0", ip="10.0.0.9")
    cluster.create_service("web", other_endpoints(5))
    h = harness(kube, tmp_path, "batch-0", "endpoint_drain: {propagation_delay: 10s, fallback_delay: 20s}")
    cluster.delete_pod("batch-0")
    deadline = Deadline(30)
    started = time.monotonic()
    with LogRecords.capture("kubernetes") as logs:
        await h.shutdown_started(deadline)
        await h.pre_stop(deadline)
    assert time.monotonic() - started < 3
    assert any("in no EndpointSlice: nothing to drain" in m for m in logs.messages), logs.messages


async def test_deadline_follows_the_pods_deletion_grace(kube: KubeTarget, tmp_path: Path) -> None:
    cluster = kube.cluster
    cluster.create_pod("web-0", grace=30)
    h = harness(kube, tmp_path, "web-0", "deadline_margin: 1s")
    cluster.delete_pod("web-0", grace=6)  # kubectl delete --grace-period=6
    deadline = Deadline(30)
    await h.shutdown_started(deadline)
    assert deadline.reasons == ["pod deletion deadline"]
    # SIGKILL comes about 6 s after the deletion; less the 1 s margin.
    assert 3.0 <= deadline.remaining() <= 5.0, deadline.remaining()


async def test_a_longer_pod_grace_does_not_extend_the_deadline(kube: KubeTarget, tmp_path: Path) -> None:
    cluster = kube.cluster
    cluster.create_pod("web-0", grace=120)
    h = harness(kube, tmp_path, "web-0", "")
    cluster.delete_pod("web-0")
    deadline = Deadline(10)
    await h.shutdown_started(deadline)
    assert deadline.reasons == []
    assert deadline.remaining() > 9


async def test_drain_is_cut_short_by_the_deadline(kube: KubeTarget, tmp_path: Path) -> None:
    cluster = kube.cluster
    pod = cluster.create_pod("web-0", grace=4, ip="10.0.0.7")
    cluster.create_service("web", [pod_endpoints(pod, "10.0.0.7")])
    h = harness(kube, tmp_path, "web-0", "endpoint_drain: {propagation_delay: 0s, fallback_delay: 20s}")
    cluster.delete_pod("web-0")  # the endpoints never flip
    deadline = Deadline(30)
    started = time.monotonic()
    with LogRecords.capture("kubernetes") as logs:
        await h.shutdown_started(deadline)
        await h.pre_stop(deadline)
    took = time.monotonic() - started
    assert took < 4.5, f"the drain outlived the pod's grace period ({took:.1f}s)"
    assert any("endpoint drain timed out" in m for m in logs.at(logging.WARNING)), logs.messages
    assert _step(h.ctx, "endpoint drain").outcome == "timeout"  # type: ignore[attr-defined]


async def test_watch_expiring_mid_drain_relists(fake: KubeAPIServer, kube: KubeTarget, tmp_path: Path) -> None:
    cluster = kube.cluster
    pod = cluster.create_pod("web-0", ip="10.0.0.7")
    cluster.create_service("web", [pod_endpoints(pod, "10.0.0.7")])
    h = harness(kube, tmp_path, "web-0", "endpoint_drain: {propagation_delay: 0s, fallback_delay: 20s}")
    cluster.delete_pod("web-0")
    deadline = Deadline(30)

    def watching() -> bool:
        return any(r.query.get("watch") == "true" for r in fake.requests if "endpointslices" in r.path) or any(
            True for w in fake.store._watchers if w.resource.plural == "endpointslices"
        )

    async def expire_then_flip() -> None:
        while not watching():
            await trio.sleep(0.02)
        await trio.sleep(0.2)
        assert fake.store.expire_watches() >= 1
        # The change happens while the plugin has no watch: only a relist sees it.
        cluster.set_pod_endpoints(pod["metadata"]["uid"], terminating=True)

    with LogRecords.capture("kubernetes") as logs:
        await h.shutdown_started(deadline)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(expire_then_flip)
            with trio.fail_after(10):
                await h.pre_stop(deadline)
    assert len(_plugin_lists(fake)) >= 2, "no relist after 410 Gone"
    assert any("410" in m for m in logs.messages), logs.messages
    assert _step(h.ctx, "endpoint drain").outcome == "ok"  # type: ignore[attr-defined]


async def test_watch_resumes_after_server_side_timeout(fake: KubeAPIServer, kube: KubeTarget, tmp_path: Path) -> None:
    cluster = kube.cluster
    pod = cluster.create_pod("web-0", ip="10.0.0.7")
    cluster.create_service("web", [pod_endpoints(pod, "10.0.0.7")])
    fake.options.bookmark_interval = 0.2
    h = harness(
        kube,
        tmp_path,
        "web-0",
        "endpoint_drain: {propagation_delay: 0s, watch_timeout: 1s, fallback_delay: 20s}",
    )
    deletion = cluster.delete_pod_and_flip("web-0", flip_after=2.5)
    deadline = Deadline(30)
    await h.shutdown_started(deadline)
    ended = await h.pre_stop(deadline)
    assert ended >= deletion.wait_flipped()
    watches = [r for r in fake.requests_matching("GET", "/endpointslices$") if r.query.get("watch") == "true"]
    assert len(watches) >= 2, "the watch was not resumed after the server closed it"
    # Resumed from a version (a bookmark's or an event's), never from scratch.
    assert all(r.query.get("resourceVersion") for r in watches)
    assert all(r.query.get("allowWatchBookmarks") == "true" for r in watches)
    assert len(_plugin_lists(fake)) == 1, "a server-side timeout must not cost a relist"


async def test_api_down_falls_back_to_the_fixed_delay(fake: KubeAPIServer, kube: KubeTarget, tmp_path: Path) -> None:
    cluster = kube.cluster
    pod = cluster.create_pod("web-0", ip="10.0.0.7")
    cluster.create_service("web", [pod_endpoints(pod, "10.0.0.7")])
    h = harness(kube, tmp_path, "web-0", "endpoint_drain: {fallback_delay: 1.5s}\nrequest_timeout: 1s")
    cluster.delete_pod("web-0")
    deadline = Deadline(30)
    with LogRecords.capture("kubernetes") as logs:
        fake.stop()
        started = time.monotonic()
        await h.shutdown_started(deadline)
        await h.pre_stop(deadline)
        took = time.monotonic() - started
        fake.start()
    assert 1.4 <= took < 4, took
    warnings = logs.at(logging.WARNING)
    assert any("falls back to a fixed 1.5 s wait" in m and "unreachable" in m for m in warnings), warnings
    assert _step(h.ctx, "fallback delay").outcome == "ok"  # type: ignore[attr-defined]


async def test_forbidden_falls_back_and_says_why(fake: KubeAPIServer, kube: KubeTarget, tmp_path: Path) -> None:
    cluster = kube.cluster
    pod = cluster.create_pod("web-0", ip="10.0.0.7")
    cluster.create_service("web", [pod_endpoints(pod, "10.0.0.7")])
    h = harness(kube, tmp_path, "web-0", "endpoint_drain: {fallback_delay: 1s}")
    cluster.delete_pod("web-0")
    fake.fail("/endpointslices$", 403)  # RBAC lacks list endpointslices
    deadline = Deadline(30)
    started = time.monotonic()
    with LogRecords.capture("kubernetes") as logs:
        await h.shutdown_started(deadline)
        await h.pre_stop(deadline)
    took = time.monotonic() - started
    assert 0.9 <= took < 3, took
    assert any("HTTP 403" in m for m in logs.at(logging.WARNING)), logs.messages


async def test_error_mid_watch_falls_back(fake: KubeAPIServer, kube: KubeTarget, tmp_path: Path) -> None:
    cluster = kube.cluster
    pod = cluster.create_pod("web-0", ip="10.0.0.7")
    cluster.create_service("web", [pod_endpoints(pod, "10.0.0.7")])
    h = harness(kube, tmp_path, "web-0", "endpoint_drain: {fallback_delay: 2s, watch_timeout: 1s}")
    cluster.delete_pod("web-0")
    fake.fail("/endpointslices$", 500, watch=True)
    deadline = Deadline(30)
    started = time.monotonic()
    with LogRecords.capture("kubernetes") as logs:
        await h.shutdown_started(deadline)
        await h.pre_stop(deadline)
    took = time.monotonic() - started
    assert 1.9 <= took < 4, took
    assert any("HTTP 500" in m for m in logs.at(logging.WARNING)), logs.messages


async def test_slow_api_never_outlives_the_deadline(fake: KubeAPIServer, kube: KubeTarget, tmp_path: Path) -> None:
    cluster = kube.cluster
    cluster.create_pod("web-0", ip="10.0.0.7")
    h = harness(kube, tmp_path, "web-0", "endpoint_drain: {fallback_delay: 20s}\nrequest_timeout: 30s")
    fake.slow("/pods/web-0$", 20)
    deadline = Deadline(2)
    started = time.monotonic()
    await h.shutdown_started(deadline)
    await h.pre_stop(deadline)
    took = time.monotonic() - started
    assert took < 2.5, f"hooks ran {took:.1f}s past a 2 s deadline"
    assert _step(h.ctx, "read pod").outcome == "error"  # type: ignore[attr-defined]


async def test_20_services_and_5000_endpoints_drain_promptly_after_the_flip(kube: KubeTarget, tmp_path: Path) -> None:
    cluster = kube.cluster
    pod = cluster.create_pod("web-0", ip="10.0.0.7")
    others = other_endpoints(5000 - 20)
    per_service = len(others) // 20
    for index in range(20):
        mine = [pod_endpoints(pod, "10.0.0.7")]
        cluster.create_service(f"svc-{index:02d}", mine + others[index * per_service : (index + 1) * per_service])
    assert sum(len(s.get("endpoints") or []) for s in cluster.list_slices()) == 5000
    h = harness(kube, tmp_path, "web-0", "endpoint_drain: {propagation_delay: 0s, fallback_delay: 30s}")
    deletion = cluster.delete_pod_and_flip("web-0", flip_after=1.0)
    deadline = Deadline(30)
    await h.shutdown_started(deadline)
    ended = await h.pre_stop(deadline)
    lag = ended - deletion.wait_flipped()
    # The target is 100 ms; a loaded CI machine gets a generous bound.
    assert 0 <= lag < 2.0, f"drain ended {lag:.3f}s after the last flip"


def _plugin_lists(fake: KubeAPIServer) -> list[object]:
    """The plugin's LISTs of slices (it pages with limit=; the scenario's own reads do not)."""
    return [
        r
        for r in fake.requests_matching("GET", "/endpointslices$")
        if r.query.get("watch") != "true" and "limit" in r.query
    ]


async def test_never_updated_mirrored_slice_can_be_left_out(kube: KubeTarget, tmp_path: Path) -> None:
    """A slice mirrored from a hand-made Endpoints object (no targetRef, matched
    by IP) is never flipped by the deletion; managed_by leaves it out."""
    cluster = kube.cluster
    pod = cluster.create_pod("web-0", ip="10.0.0.7")
    cluster.create_service("web", [pod_endpoints(pod, "10.0.0.7")])
    cluster.create_service("legacy", [Endpoint("10.0.0.7")], managed_by="endpointslicemirroring-controller.k8s.io")
    h = harness(
        kube,
        tmp_path,
        "web-0",
        "endpoint_drain: {propagation_delay: 0s, fallback_delay: 20s, managed_by: [pid1-supervisor-tests]}",
    )
    deletion = cluster.delete_pod_and_flip("web-0", flip_after=0.5)
    deadline = Deadline(30)
    with LogRecords.capture("kubernetes") as logs:
        await h.shutdown_started(deadline)
        ended = await h.pre_stop(deadline)
    assert deletion.wait_flipped() <= ended < deletion.wait_flipped() + 5
    assert any("1 of 1 slices still route" in m for m in logs.messages), logs.messages
    assert _step(h.ctx, "endpoint drain").outcome == "ok"  # type: ignore[attr-defined]


async def test_pod_matched_by_ip_when_slices_have_no_target_ref(kube: KubeTarget, tmp_path: Path) -> None:
    cluster = kube.cluster
    pod = cluster.create_pod("web-0", ip="10.0.0.7")
    names = cluster.create_service("web", [Endpoint("10.0.0.7"), Endpoint("10.0.0.8")])
    h = harness(kube, tmp_path, "web-0", "endpoint_drain: {propagation_delay: 0s, fallback_delay: 20s}")
    cluster.delete_pod("web-0")
    deadline = Deadline(30)

    async def remove_later() -> None:
        await trio.sleep(0.5)
        slice_obj = cluster.list_slices()[0]
        assert slice_obj["metadata"]["name"] == names[0]
        slice_obj["endpoints"] = [e for e in slice_obj["endpoints"] if e["addresses"] != ["10.0.0.7"]]
        cluster.discovery.replace_namespaced_endpoint_slice(names[0], cluster.namespace, slice_obj)

    started = time.monotonic()
    async with trio.open_nursery() as nursery:
        await h.shutdown_started(deadline)
        nursery.start_soon(remove_later)
        await h.pre_stop(deadline)
    assert 0.4 < time.monotonic() - started < 5
    assert pod["status"]["podIP"] == "10.0.0.7"
    assert _step(h.ctx, "endpoint drain").outcome == "ok"  # type: ignore[attr-defined]
