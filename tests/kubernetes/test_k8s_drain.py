"""The endpoint drain and the pod deadline, hook by hook, against the real
control plane: the EndpointSlice controller publishes the pods' endpoints
and flips them when a pod is deleted; faults come from the proxy."""

from __future__ import annotations

import contextlib
import logging
import time
from pathlib import Path

import pytest
import trio

from supervisor import Deadline
from tests.cluster import FaultProxy, Rule
from tests.kubernetes.k8s_helpers import (
    Harness,
    KubeTarget,
    controllers_held,
    controllers_held_until_the_plugin_looked,
    harness,
)
from tests.plugins._helpers import LogRecords

IP = "10.244.0.7"


def _step(ctx: object, name: str) -> object:
    steps = [s for s in ctx.timeline.steps if s.name == name]  # type: ignore[attr-defined]
    assert steps, f"no timeline step {name!r}"
    return steps[-1]


def _web(kube: KubeTarget, *, others: int = 1, grace: int = 30) -> dict[str, object]:
    """Pod web-0 (and ``others`` more pods: by default a second replica, so
    that web-0 is not the last serving endpoint, which keeps serving until
    the stops) behind Service web, published."""
    ns = kube.cluster
    pod = ns.run_pod("web-0", ips=[IP], labels={"app": "web"}, grace=grace)
    pods = [pod] + [ns.run_pod(f"web-{i}", ips=[f"10.244.1.{i}"], labels={"app": "web"}) for i in range(1, others + 1)]
    ns.create_service("web", {"app": "web"})
    ns.wait_endpoints("web", pods)
    return pod


async def test_drain_ends_after_the_controller_flips_and_the_propagation_delay(
    kube: KubeTarget, tmp_path: Path
) -> None:
    ns = kube.cluster
    pod = ns.run_pod("web-0", ips=[IP], labels={"app": "web", "admin": "yes"})
    # web-1 is behind both Services: web-0 is the last endpoint of neither.
    others = [
        ns.run_pod(f"web-{i}", ips=[f"10.244.1.{i}"], labels={"app": "web", **({"admin": "yes"} if i == 1 else {})})
        for i in (1, 2, 3)
    ]
    unrelated = [ns.run_pod(f"batch-{i}", ips=[f"10.244.2.{i}"], labels={"app": "batch"}) for i in (1, 2)]
    ns.create_service("web", {"app": "web"})
    ns.create_service("admin", {"admin": "yes"})
    ns.create_service("unrelated", {"app": "batch"})
    ns.wait_endpoints("web", [pod, *others])
    ns.wait_endpoints("admin", [pod, others[0]])
    ns.wait_endpoints("unrelated", unrelated)
    h = harness(
        kube,
        tmp_path,
        "web-0",
        "endpoint_drain: {propagation_delay: 0.5s, fallback_delay: 20s, progress_interval: 0.2s}",
    )
    # The controller is held until the plugin has seen the endpoints route,
    # so it sees the flip later, through its watch.
    watch = ns.watch_slices(pod)
    deadline = Deadline(30)
    with controllers_held_until_the_plugin_looked(kube.plane), LogRecords.capture("kubernetes") as logs:
        ns.delete_pod("web-0")
        await h.shutdown_started(deadline)
        ended = await h.pre_stop(deadline)
    flipped = watch.wait_flipped()
    # The reference (its own process, raw lines) sees the controller's write
    # within tens of milliseconds of the plugin, also on a busy machine.
    assert ended >= flipped + 0.5 - 0.1, "the drain ended before the endpoints flipped + propagation_delay"
    assert ended < flipped + 0.5 + 5, "the drain went on long after the flip"
    assert any("2 of 2 slices still route to this pod" in m for m in logs.messages), logs.messages
    assert _step(h.ctx, "endpoint drain").outcome == "ok"  # type: ignore[attr-defined]
    assert _step(h.ctx, "propagation delay").outcome == "ok"  # type: ignore[attr-defined]
    # What the controller wrote: still serving, terminating, not ready.
    (endpoint,) = ns.pod_endpoints(pod["metadata"]["uid"], "web")  # type: ignore[index]
    assert endpoint["conditions"] == {"ready": False, "serving": True, "terminating": True}


async def test_services_setting_limits_the_drain_to_the_named_ones(kube: KubeTarget, tmp_path: Path) -> None:
    ns = kube.cluster
    pod = ns.run_pod("web-0", ips=[IP], labels={"app": "web", "admin": "yes"})
    ns.create_service("web", {"app": "web"})
    # A slice this pod is in that the plugin is told to ignore: it is never
    # flipped (a Service without selector, endpoints mirrored from an
    # Endpoints object maintained by hand), so following it would time out.
    _mirrored_service(kube, "legacy")
    ns.wait_endpoints("web", [pod])
    h = harness(
        kube, tmp_path, "web-0", "endpoint_drain: {services: [web], propagation_delay: 0s, fallback_delay: 20s}"
    )
    logs = await _delete_and_drain(kube, h)
    assert any("1 of 1 slices still route" in m for m in logs.messages), logs.messages
    assert _step(h.ctx, "endpoint drain").outcome == "ok"  # type: ignore[attr-defined]


async def _delete_and_drain(kube: KubeTarget, h: Harness, *, lag: bool = True, pod: str = "web-0") -> LogRecords:
    """Delete the pod with the controller held back until the plugin has
    looked (so it watches the flip happen), then run the shutdown hooks."""
    deadline = Deadline(30)
    with contextlib.ExitStack() as stack:
        if lag:
            stack.enter_context(controllers_held_until_the_plugin_looked(kube.plane))
        logs = stack.enter_context(LogRecords.capture("kubernetes"))
        kube.cluster.delete_pod(pod)
        await h.shutdown_started(deadline)
        with trio.fail_after(30):
            await h.pre_stop(deadline)
    return logs


def _mirrored_service(kube: KubeTarget, name: str) -> None:
    """A selector-less Service with a hand-made Endpoints object naming web-0's
    IP; the EndpointSlice mirroring controller turns it into a slice."""
    ns = kube.cluster
    ns.core.create_namespaced_service(
        ns.name, {"metadata": {"name": name}, "spec": {"ports": [{"port": 80, "protocol": "TCP"}]}}
    )
    endpoints = {
        "metadata": {"name": name},
        "subsets": [{"addresses": [{"ip": IP}], "ports": [{"port": 80, "protocol": "TCP"}]}],
    }
    ns.core.create_namespaced_endpoints(ns.name, endpoints)
    stop = time.monotonic() + 30
    while not ns.list_slices(name):
        assert time.monotonic() < stop, "the mirroring controller made no slice"
        time.sleep(0.05)


async def test_never_updated_mirrored_slice_can_be_left_out_by_manager(kube: KubeTarget, tmp_path: Path) -> None:
    ns = kube.cluster
    _web(kube)
    _mirrored_service(kube, "legacy")
    h = harness(
        kube,
        tmp_path,
        "web-0",
        "endpoint_drain: {propagation_delay: 0s, fallback_delay: 20s, managed_by: [endpointslice-controller.k8s.io]}",
    )
    ns.delete_pod("web-0")
    deadline = Deadline(30)
    await h.shutdown_started(deadline)
    started = time.monotonic()
    await h.pre_stop(deadline)
    assert time.monotonic() - started < 5
    assert _step(h.ctx, "endpoint drain").outcome == "ok"  # type: ignore[attr-defined]


async def test_no_deletion_timestamp_skips_the_drain(kube: KubeTarget, tmp_path: Path) -> None:
    _web(kube)
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


async def test_pod_in_no_service_has_nothing_to_drain(kube: KubeTarget, tmp_path: Path) -> None:
    ns = kube.cluster
    ns.run_pod("batch-0", ips=["10.244.0.9"], labels={"app": "batch"})
    _web(kube, others=0)
    h = harness(kube, tmp_path, "batch-0", "endpoint_drain: {propagation_delay: 10s, fallback_delay: 20s}")
    ns.delete_pod("batch-0")
    deadline = Deadline(30)
    started = time.monotonic()
    with LogRecords.capture("kubernetes") as logs:
        await h.shutdown_started(deadline)
        await h.pre_stop(deadline)
    assert time.monotonic() - started < 3
    assert any("in no EndpointSlice: nothing to drain" in m for m in logs.messages), logs.messages


async def test_dual_stack_pod_drains_from_both_families(kube: KubeTarget, tmp_path: Path) -> None:
    ns = kube.cluster
    pod = ns.run_pod("web-0", ips=[IP, "fd00:10:244::7"], labels={"app": "web"})
    ns.create_service("web", {"app": "web"}, dual_stack=True)
    ns.wait_endpoints("web", [pod], slices=2)
    families = sorted(s["addressType"] for s in ns.list_slices("web"))
    assert families == ["IPv4", "IPv6"]
    h = harness(kube, tmp_path, "web-0", "endpoint_drain: {propagation_delay: 0s, fallback_delay: 20s}")
    logs = await _delete_and_drain(kube, h)
    assert any("2 of 2 slices still route to this pod" in m for m in logs.messages), logs.messages
    assert _step(h.ctx, "endpoint drain").outcome == "ok"  # type: ignore[attr-defined]


async def test_deadline_follows_the_pods_deletion_grace(kube: KubeTarget, tmp_path: Path) -> None:
    ns = kube.cluster
    ns.run_pod("web-0", grace=30)
    h = harness(kube, tmp_path, "web-0", "deadline_margin: 1s")
    before = trio.current_time()
    ns.delete_pod("web-0", grace=6)  # kubectl delete --grace-period=6
    deadline = Deadline(30)
    await h.shutdown_started(deadline)
    assert deadline.reasons == ["pod deletion deadline"]
    # SIGKILL comes 6 s after the deletion, less the 1 s margin: at the
    # latest 5 s after this SIGTERM (the grace count), at the earliest 4 s
    # after the call (deletionTimestamp, which drops the second's fraction).
    # Bounds on the moments themselves, however long the calls took.
    assert before + 4.0 - 0.05 <= deadline.at <= deadline.started + 5.0 + 0.05, (
        deadline.at - before,
        deadline.at - deadline.started,
    )


async def test_a_longer_pod_grace_does_not_extend_the_deadline(kube: KubeTarget, tmp_path: Path) -> None:
    ns = kube.cluster
    ns.run_pod("web-0", grace=120)
    h = harness(kube, tmp_path, "web-0", "")
    ns.delete_pod("web-0")
    deadline = Deadline(10)
    await h.shutdown_started(deadline)
    assert deadline.reasons == []
    assert deadline.remaining() > 9


async def test_drain_is_cut_short_by_the_deadline(kube: KubeTarget, tmp_path: Path) -> None:
    ns = kube.cluster
    ns.run_pod("web-0", ips=[IP], labels={"app": "web"}, grace=6)
    _mirrored_service(kube, "legacy")  # never flipped
    h = harness(kube, tmp_path, "web-0", "endpoint_drain: {propagation_delay: 0s, fallback_delay: 20s}")
    ns.delete_pod("web-0")
    deadline = Deadline(30)
    started = time.monotonic()
    with LogRecords.capture("kubernetes") as logs:
        await h.shutdown_started(deadline)
        await h.pre_stop(deadline)
    took = time.monotonic() - started
    assert took < 6.5, f"the drain outlived the pod's grace period ({took:.1f}s)"
    assert any("endpoint drain timed out" in m for m in logs.at(logging.WARNING)), logs.messages
    assert _step(h.ctx, "endpoint drain").outcome == "timeout"  # type: ignore[attr-defined]


def _plugin_lists(proxy: FaultProxy) -> list[object]:
    return [r for r in proxy.requests_matching("GET", "/endpointslices$") if r.query.get("watch") not in ("true", "1")]


def _plugin_watches(proxy: FaultProxy) -> list[object]:
    return [r for r in proxy.requests_matching("GET", "/endpointslices$") if r.query.get("watch") in ("true", "1")]


async def test_watch_expired_mid_drain_relists(proxy: FaultProxy, kube: KubeTarget, tmp_path: Path) -> None:
    ns = kube.cluster
    _web(kube)
    h = harness(kube, tmp_path, "web-0", "endpoint_drain: {propagation_delay: 0s, fallback_delay: 20s}")
    # The first watch is answered as the server answers a resourceVersion
    # that is too old; the flip happens while the plugin has no watch, so
    # only the relist sees it.
    gone = proxy.add(Rule("/endpointslices$", watch=True, gone=True, delay=1.5, times=1))
    deadline = Deadline(30)
    # The controller flips once that watch is in the proxy's hands.
    with controllers_held(kube.plane, lambda: gone.fired >= 1), LogRecords.capture("kubernetes") as logs:
        ns.delete_pod("web-0")
        await h.shutdown_started(deadline)
        with trio.fail_after(15):
            await h.pre_stop(deadline)
    assert len(_plugin_lists(proxy)) >= 2, "no relist after 410 Gone"
    assert any("410" in m for m in logs.messages), logs.messages
    assert _step(h.ctx, "endpoint drain").outcome == "ok"  # type: ignore[attr-defined]


async def test_watch_resumes_after_server_side_timeout(proxy: FaultProxy, kube: KubeTarget, tmp_path: Path) -> None:
    ns = kube.cluster
    pod = _web(kube)
    h = harness(
        kube, tmp_path, "web-0", "endpoint_drain: {propagation_delay: 0s, watch_timeout: 1s, fallback_delay: 20s}"
    )
    watch = ns.watch_slices(pod)
    deadline = Deadline(30)
    # The controller flips only once the server has ended the first watch
    # (after watch_timeout) and the plugin has watched again.
    with controllers_held(kube.plane, lambda: len(_plugin_watches(proxy)) >= 2):
        ns.delete_pod("web-0")
        await h.shutdown_started(deadline)
        with trio.fail_after(20):
            ended = await h.pre_stop(deadline)
    assert ended >= watch.wait_flipped() - 0.1
    watches = _plugin_watches(proxy)
    assert len(watches) >= 2, "the watch was not resumed after the server closed it"
    # Resumed from a version (a bookmark's or an event's), never from scratch.
    assert all(r.query.get("resourceVersion") for r in watches)  # type: ignore[attr-defined]
    assert all(r.query.get("allowWatchBookmarks") == "true" for r in watches)  # type: ignore[attr-defined]
    assert len(_plugin_lists(proxy)) == 1, "a server-side timeout must not cost a relist"
    assert _step(h.ctx, "endpoint drain").outcome == "ok"  # type: ignore[attr-defined]


@pytest.mark.parametrize("abruptly", [False, True], ids=["ended", "dropped"])
async def test_watch_ended_or_dropped_mid_drain_is_resumed(
    proxy: FaultProxy, kube: KubeTarget, tmp_path: Path, abruptly: bool
) -> None:
    ns = kube.cluster
    pod = _web(kube)
    h = harness(kube, tmp_path, "web-0", "endpoint_drain: {propagation_delay: 0s, fallback_delay: 20s}")
    watch = ns.watch_slices(pod)
    deadline = Deadline(30)

    async def end_the_first_watch() -> None:
        while proxy.open_watches == 0:
            await trio.sleep(0.02)
        assert proxy.end_watches(abruptly=abruptly) == 1

    # The controller flips once the plugin has watched again.
    with controllers_held(kube.plane, lambda: len(_plugin_watches(proxy)) >= 2):
        ns.delete_pod("web-0")
        await h.shutdown_started(deadline)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(end_the_first_watch)
            with trio.fail_after(15):
                ended = await h.pre_stop(deadline)
    assert ended >= watch.wait_flipped() - 0.1
    watches = _plugin_watches(proxy)
    assert len(watches) >= 2, "the watch was not resumed"
    assert all(r.query.get("resourceVersion") for r in watches)  # type: ignore[attr-defined]
    assert len(_plugin_lists(proxy)) == 1, "an ended watch must not cost a relist"
    assert _step(h.ctx, "endpoint drain").outcome == "ok"  # type: ignore[attr-defined]


async def test_api_down_falls_back_to_the_fixed_delay(proxy: FaultProxy, kube: KubeTarget, tmp_path: Path) -> None:
    ns = kube.cluster
    _web(kube)
    h = harness(kube, tmp_path, "web-0", "endpoint_drain: {fallback_delay: 1.5s}\nrequest_timeout: 1s")
    ns.delete_pod("web-0")
    deadline = Deadline(30)
    with LogRecords.capture("kubernetes") as logs:
        proxy.stop()  # connection refused
        started = time.monotonic()
        await h.shutdown_started(deadline)
        await h.pre_stop(deadline)
        took = time.monotonic() - started
    assert 1.4 <= took < 4, took
    warnings = logs.at(logging.WARNING)
    assert any("falls back to a fixed 1.5 s wait" in m and "unreachable" in m for m in warnings), warnings
    assert _step(h.ctx, "fallback delay").outcome == "ok"  # type: ignore[attr-defined]


async def test_a_dropped_connection_is_read_again(proxy: FaultProxy, kube: KubeTarget, tmp_path: Path) -> None:
    """A kept-alive connection that a server or a load balancer closed while
    the pod ran fails the next request with no answer.  The reads at SIGTERM
    try again on a fresh connection: neither the pod's deletion nor the
    drain is lost to it (without the retry the drain falls back to 20 s)."""
    ns = kube.cluster
    _web(kube)
    h = harness(kube, tmp_path, "web-0", "endpoint_drain: {fallback_delay: 20s}")
    read = proxy.add(Rule("/pods/web-0$", method="GET", close=True, times=1))
    listed = proxy.add(Rule("/endpointslices$", watch=False, close=True, times=1))
    ns.delete_pod("web-0")
    deadline = Deadline(30)
    await h.shutdown_started(deadline)
    with trio.fail_after(15):
        await h.pre_stop(deadline)
    assert (read.fired, listed.fired) == (1, 1), "the connections were not dropped"
    assert _step(h.ctx, "read pod").outcome == "ok"  # type: ignore[attr-defined]
    assert _step(h.ctx, "endpoint drain").outcome == "ok"  # type: ignore[attr-defined]


async def test_closed_connection_falls_back(proxy: FaultProxy, kube: KubeTarget, tmp_path: Path) -> None:
    ns = kube.cluster
    _web(kube)
    h = harness(kube, tmp_path, "web-0", "endpoint_drain: {fallback_delay: 1s}\nrequest_timeout: 2s")
    ns.delete_pod("web-0")
    proxy.add(Rule("/endpointslices$", close=True))
    deadline = Deadline(30)
    with LogRecords.capture("kubernetes") as logs:
        await h.shutdown_started(deadline)
        await h.pre_stop(deadline)
    assert any("falls back to a fixed 1.0 s wait" in m for m in logs.at(logging.WARNING)), logs.messages


@pytest.mark.parametrize("status", [403, 500])
async def test_error_on_the_list_falls_back_and_says_why(
    proxy: FaultProxy, kube: KubeTarget, tmp_path: Path, status: int
) -> None:
    ns = kube.cluster
    _web(kube)
    h = harness(kube, tmp_path, "web-0", "endpoint_drain: {fallback_delay: 1s}")
    ns.delete_pod("web-0")
    proxy.fail("/endpointslices$", status, watch=False)
    deadline = Deadline(30)
    started = time.monotonic()
    with LogRecords.capture("kubernetes") as logs:
        await h.shutdown_started(deadline)
        await h.pre_stop(deadline)
    took = time.monotonic() - started
    assert 0.9 <= took < 3, took
    assert any(f"HTTP {status}" in m for m in logs.at(logging.WARNING)), logs.messages


async def test_error_mid_watch_falls_back(proxy: FaultProxy, kube: KubeTarget, tmp_path: Path) -> None:
    ns = kube.cluster
    ns.run_pod("web-0", ips=[IP], labels={"app": "web"})
    # A mirrored slice never flips when the pod goes: the list finds the pod
    # routing, so the failure comes mid-watch however slowly the plugin got
    # there, and without holding any controller.
    _mirrored_service(kube, "legacy")
    h = harness(kube, tmp_path, "web-0", "endpoint_drain: {fallback_delay: 2s, watch_timeout: 1s}")
    failing = proxy.fail("/endpointslices$", 500, watch=True)
    deadline = Deadline(30)
    with LogRecords.capture("kubernetes") as logs:
        ns.delete_pod("web-0")
        await h.shutdown_started(deadline)
        started = time.monotonic()
        ended = await h.pre_stop(deadline)
    assert failing.fired >= 1, "the plugin never watched"
    # The fixed delay counts from the start of pre_stop, the list and the
    # failed watch included; a busy machine only makes it end later.
    assert 2.0 - 0.05 <= ended - started < 2.0 + 2.5, ended - started
    assert any("HTTP 500" in m for m in logs.at(logging.WARNING)), logs.messages
    assert _step(h.ctx, "endpoint drain").outcome == "fallback"  # type: ignore[attr-defined]
    assert _step(h.ctx, "fallback delay").detail.startswith("HTTP 500")  # type: ignore[attr-defined]


async def test_slow_api_never_outlives_the_deadline(proxy: FaultProxy, kube: KubeTarget, tmp_path: Path) -> None:
    kube.cluster.run_pod("web-0", ips=[IP])
    h = harness(kube, tmp_path, "web-0", "endpoint_drain: {fallback_delay: 20s}\nrequest_timeout: 30s")
    held = proxy.slow("/pods/web-0$", 20)
    deadline = Deadline(2)
    await h.shutdown_started(deadline)
    await h.pre_stop(deadline)
    # On trio's clock, which the deadline also reads: the hooks ended within
    # the 2 s, not at the 20 s the proxy holds the read nor the 30 s request
    # timeout.  A busy machine can only make them end later than the
    # deadline's hook end, so the window is generous on that side alone.
    ended = trio.current_time()
    hooks_end = deadline.at - deadline.reserve
    assert hooks_end - 0.05 <= ended < deadline.wall + 1.5, (ended - deadline.started, hooks_end - deadline.started)
    assert held.fired == 1, "the pod was never read"
    assert _step(h.ctx, "read pod").outcome == "error"  # type: ignore[attr-defined]
    # Without the pod the drain falls back to the fixed wait, cut to the deadline.
    assert _step(h.ctx, "endpoint drain").outcome == "fallback"  # type: ignore[attr-defined]


async def test_many_slices_are_paged(
    proxy: FaultProxy, kube: KubeTarget, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The plugin pages its list (limit/continue as the server hands them
    out); many other slices in the namespace do not slow the drain down."""
    import supervisor_kubernetes._api as api

    ns = kube.cluster
    pod = _web(kube)
    # Slices of a manager of the user's own, for other Services: the
    # plugin reads them all and finds this pod in none of them.
    for index in range(120):
        ns.discovery.create_namespaced_endpoint_slice(
            ns.name,
            {
                "metadata": {
                    "name": f"custom-{index:03d}",
                    "labels": {
                        "kubernetes.io/service-name": f"custom-{index:03d}",
                        "endpointslice.kubernetes.io/managed-by": "custom.example.com",
                    },
                },
                "addressType": "IPv4",
                "endpoints": [{"addresses": [f"10.245.{index}.{i}"]} for i in range(1, 21)],
            },
            _preload_content=False,
        ).release_conn()
    monkeypatch.setattr(api, "PAGE_SIZE", 50)
    h = harness(kube, tmp_path, "web-0", "endpoint_drain: {propagation_delay: 0s, fallback_delay: 30s}")
    watch = ns.watch_slices(pod)
    deadline = Deadline(30)
    with controllers_held_until_the_plugin_looked(kube.plane):
        ns.delete_pod("web-0")
        await h.shutdown_started(deadline)
        ended = await h.pre_stop(deadline)
    lag = ended - watch.wait_flipped()
    assert lag < 2.0, f"drain ended {lag:.3f}s after the flip"
    pages = _plugin_lists(proxy)
    assert len(pages) == 3, [r.query for r in pages]  # type: ignore[attr-defined]
    assert [bool(r.query.get("continue")) for r in pages] == [False, True, True]  # type: ignore[attr-defined]
    assert _step(h.ctx, "endpoint drain").outcome == "ok"  # type: ignore[attr-defined]


async def test_publish_not_ready_addresses_counts_as_drained_and_says_why(kube: KubeTarget, tmp_path: Path) -> None:
    """With publishNotReadyAddresses the controller keeps a terminating
    endpoint ready, so kube-proxy routes to it until the pod is gone: no
    wait can end that, the drain says so and does not wait for it."""
    ns = kube.cluster
    pod = ns.run_pod("web-0", ips=[IP], labels={"app": "web"})
    ns.create_service("web", {"app": "web"}, publish_not_ready=True)
    ns.wait_endpoints("web", [pod])
    # keep_serving off: what is reported, not how long it serves
    # (test_k8s_budget.py), is the point here.
    h = harness(
        kube, tmp_path, "web-0", "endpoint_drain: {propagation_delay: 0s, fallback_delay: 20s, keep_serving: false}"
    )
    logs = await _delete_and_drain(kube, h)
    (endpoint,) = ns.pod_endpoints(pod["metadata"]["uid"], "web")
    assert endpoint["conditions"] == {"ready": True, "serving": True, "terminating": True}
    warnings = logs.at(logging.WARNING)
    assert any("Service web publishes not-ready addresses" in m for m in warnings), logs.messages
    assert _step(h.ctx, "endpoint drain").outcome == "ok"  # type: ignore[attr-defined]


@pytest.mark.parametrize("others", [0, 2])
async def test_the_last_serving_endpoint_is_reported(kube: KubeTarget, tmp_path: Path, others: int) -> None:
    """Terminating but serving, and no other endpoint ready: kube-proxy falls
    back to it.  Reported only then, not when other pods are ready."""
    _web(kube, others=others)
    h = harness(
        kube, tmp_path, "web-0", "endpoint_drain: {propagation_delay: 0s, fallback_delay: 20s, keep_serving: false}"
    )
    logs = await _delete_and_drain(kube, h)
    last = [m for m in logs.at(logging.WARNING) if "last serving endpoint of Service web (IPv4)" in m]
    assert bool(last) == (others == 0), logs.messages
    assert _step(h.ctx, "endpoint drain").outcome == "ok"  # type: ignore[attr-defined]


async def test_a_services_name_matching_no_service_is_a_warning_at_start_and_at_sigterm(
    kube: KubeTarget, tmp_path: Path
) -> None:
    _web(kube)
    h = harness(kube, tmp_path, "web-0", "endpoint_drain: {services: [web, wbe], propagation_delay: 0s}")
    with LogRecords.capture("kubernetes") as logs:
        await h.background()
    (warning,) = logs.at(logging.WARNING)
    assert "endpoint_drain.services names 'wbe'" in warning, logs.messages
    logs = await _delete_and_drain(kube, h)
    assert any("endpoint_drain.services names 'wbe'" in m for m in logs.at(logging.WARNING)), logs.messages
    assert not any("'web'" in m for m in logs.at(logging.WARNING)), logs.messages
    assert _step(h.ctx, "endpoint drain").outcome == "ok"  # type: ignore[attr-defined]


async def test_only_misnamed_services_is_a_warning_not_a_silent_nothing(kube: KubeTarget, tmp_path: Path) -> None:
    _web(kube)
    h = harness(kube, tmp_path, "web-0", "endpoint_drain: {services: [wbe], propagation_delay: 0s}")
    logs = await _delete_and_drain(kube, h, lag=False)
    assert any("endpoint_drain.services names 'wbe'" in m for m in logs.at(logging.WARNING)), logs.messages
