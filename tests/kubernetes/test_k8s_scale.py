"""The drain's cost does not grow with the namespace: it reads only the
EndpointSlices of the Services that select the pod, found by matching the
Services' selectors against the pod's labels at start and kept current by a
watch while the pod runs (real control plane, requests seen by the proxy)."""

from __future__ import annotations

import logging
from pathlib import Path

import trio

from supervisor import Deadline
from tests.cluster import FaultProxy
from tests.kubernetes.k8s_helpers import KubeTarget, controllers_held_until_the_plugin_looked, harness
from tests.plugins._helpers import LogRecords

UNRELATED = 30


async def test_the_drain_reads_only_the_slices_of_the_services_that_select_the_pod(
    proxy: FaultProxy, kube: KubeTarget, tmp_path: Path
) -> None:
    ns = kube.cluster
    pod = ns.run_pod("web-0", ips=["10.244.0.7"], labels={"app": "web", "tier": "front"})
    other = ns.run_pod("web-1", ips=["10.244.0.8"], labels={"app": "web"})
    ns.create_service("web", {"app": "web"})
    # Services of other apps: each has a slice of its own that the drain
    # must not read.
    for index in range(UNRELATED):
        ns.create_service(f"other-{index:02d}", {"app": f"other-{index:02d}"})
    ns.wait_endpoints("web", [pod, other])
    h = harness(kube, tmp_path, "web-0", "endpoint_drain: {propagation_delay: 0s, fallback_delay: 20s}")
    with LogRecords.capture("kubernetes") as logs:
        async with trio.open_nursery() as nursery:
            # The background hook as the orchestrator runs it: until the
            # shutdown begins.
            nursery.start_soon(lambda: h.plugin.supervisor_background(ctx=h.ctx))
            with trio.fail_after(30):
                await logs.wait_for("Services that select this pod: web")
            # Created while the pod runs: the watch adds it.
            ns.create_service("front", {"tier": "front"})
            ns.wait_endpoints("front", [pod])
            with trio.fail_after(30):
                await logs.wait_for("Services that select this pod: front, web")
            nursery.cancel_scope.cancel()
        deadline = Deadline(30)
        with controllers_held_until_the_plugin_looked(kube.plane):
            ns.delete_pod("web-0")
            await h.shutdown_started(deadline)
            await h.pre_stop(deadline)
    drain_requests = [
        r for r in proxy.requests_matching("GET", "/endpointslices$") if r.query.get("watch") not in ("true", "1")
    ]
    assert drain_requests, "the drain never listed"
    selectors = {r.query.get("labelSelector") for r in drain_requests}  # type: ignore[attr-defined]
    assert selectors == {"kubernetes.io/service-name in (front,web)"}, selectors
    assert any("2 of 2 slices still route to this pod" in m for m in logs.messages), logs.messages
    (read,) = [m for m in logs.messages if m.startswith("read ") and "since the shutdown began" in m]
    objects = int(read.split()[1])
    # The pod, two slices, their watch events and Events: far fewer than the
    # namespace's slices.
    assert objects < UNRELATED, read
    steps = [s for s in h.ctx.timeline.steps if s.name == "endpoint drain"]  # type: ignore[attr-defined]
    assert steps[-1].outcome == "ok", steps


async def test_a_pod_no_service_selects_has_nothing_to_drain(
    proxy: FaultProxy, kube: KubeTarget, tmp_path: Path
) -> None:
    ns = kube.cluster
    ns.run_pod("batch-0", ips=["10.244.0.9"], labels={"app": "batch"})
    web = ns.run_pod("web-0", ips=["10.244.0.7"], labels={"app": "web"})
    ns.create_service("web", {"app": "web"})
    ns.wait_endpoints("web", [web])
    h = harness(kube, tmp_path, "batch-0", "endpoint_drain: {propagation_delay: 10s, fallback_delay: 20s}")
    with LogRecords.capture("kubernetes") as logs:
        await h.background()
        deadline = Deadline(30)
        ns.delete_pod("batch-0")
        await h.shutdown_started(deadline)
        with trio.fail_after(5):
            await h.pre_stop(deadline)
    assert any("no Service selects this pod: nothing to drain" in m for m in logs.messages), logs.messages
    assert not proxy.requests_matching("GET", "/endpointslices$"), "a slice was read for a pod no Service selects"
    assert logs.at(logging.WARNING) == [], logs.messages
