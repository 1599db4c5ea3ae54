"""How the plugin shares a short budget, on the real control plane: the
Lease release keeps the time it needs however long the drain or the fixed
delay could wait, a drain with no time to look says so, a pod that still
gets traffic keeps serving, and what cannot happen is told in the log and
as a Warning Event."""

from __future__ import annotations

import datetime
import json
import logging
import signal
import sys
import time
from pathlib import Path

import pytest
import trio

from supervisor import Deadline
from tests.cluster import FaultProxy
from tests.kubernetes.k8s_helpers import (
    EXAMPLE_LEASE,
    EXAMPLE_POD,
    EXAMPLE_SERVICE,
    REPO,
    KubeTarget,
    controllers_held,
    example_rbac_without,
    example_setup,
    harness,
)
from tests.pid1 import Supervisor
from tests.plugins._helpers import LogRecords

REPORTER = "pid1-supervisor/kubernetes"
IP = "10.244.0.7"
# The controller: on SIGTERM it writes the time and exits at once (no
# interpreter clean-up in between), so the time is its exit's.
CONTROLLER = (
    "import os, signal, sys, time\n"
    "def stop(*_):\n"
    "    with open(sys.argv[1], 'w') as f:\n"
    "        f.write(repr(time.time()))\n"
    "    os._exit(0)\n"
    "signal.signal(signal.SIGTERM, stop)\n"
    "while True:\n"
    "    time.sleep(1)\n"
)


def _controller_pod(
    tmp_path: Path, stopped_file: Path, plugin_yaml: str, *sections: str, stop_timeout: str | None = None
) -> Path:
    """A pod's configuration: CONTROLLER as the main process (it stamps its
    exit into ``stopped_file``), JSON logs at debug, and the kubernetes
    plugin with events and ``sections`` (one line of YAML each)."""
    config = tmp_path / "cfg.yaml"
    stop = f"\n    stop_timeout: {stop_timeout}" if stop_timeout else ""
    lines = "".join(f"\n    {section}" for section in sections)
    config.write_text(
        f"""
grace_period: 30s
log: {{format: json, level: debug}}
processes:
  - name: controller
    main: true
    command: {json.dumps([sys.executable, "-c", CONTROLLER, str(stopped_file)])}{stop}
plugins:
  kubernetes:
    {plugin_yaml}
    events: true{lines}
"""
    )
    return config


def _epoch(stamp: str) -> float:
    parsed = datetime.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=datetime.UTC)
    return parsed.timestamp()


def _step(ctx: object, name: str) -> object:
    steps = [s for s in ctx.timeline.steps if s.name == name]  # type: ignore[attr-defined]
    assert steps, f"no timeline step {name!r}"
    return steps[-1]


@pytest.mark.slow
@pytest.mark.parametrize("run", range(3))
def test_the_lease_is_released_when_the_fallback_fills_the_budget(kube: KubeTarget, tmp_path: Path, run: int) -> None:
    """The issue's setup: watch forbidden by the Role, ``fallback_delay:
    15s`` (the example ConfigMap's), ``kubectl delete --grace-period=10``, a
    Lease held by this pod.  The fixed delay is cut to what the deadline
    leaves, less the time kept for the release, which then comes right
    after the controller's exit rather than a lease duration later."""
    target = example_setup(kube, tmp_path, example_rbac_without("discovery.k8s.io", "endpointslices", "watch"))
    stopped_file = tmp_path / "stopped"
    config = _controller_pod(
        tmp_path,
        stopped_file,
        target.plugin_yaml,
        f"endpoint_drain: {{services: [{EXAMPLE_SERVICE}], fallback_delay: 15s}}",
        f"lease_release: {{process: controller, leases: [{{name: {EXAMPLE_LEASE}}}]}}",
    )
    with Supervisor(["-c", str(config)], env=target.pod_env(EXAMPLE_POD), cwd=REPO) as sup:
        sup.wait_for("connected as pod", timeout=60)
        # The controller flips once the plugin has found it may not watch:
        # the list still shows the pod routing, so the drain falls back.
        with controllers_held(kube.plane, lambda: "falls back" in sup.output):
            deleted = time.monotonic()
            target.cluster.delete_pod(EXAMPLE_POD, grace=10)
            sup.signal(signal.SIGTERM)  # the kubelet, at the same moment
            assert sup.wait(20) == 0, sup.output
            finished = time.monotonic()
    assert finished - deleted < 10, f"the supervisor outlived the kubelet's SIGKILL\n{sup.output}"
    assert "falls back to a fixed 15.0 s wait" in sup.output, sup.output
    released = [r for r in sup.json_records() if str(r.get("message", "")).startswith("released lease")]
    assert released, sup.output
    exited = float(stopped_file.read_text())
    lag = _epoch(str(released[0]["time"])) - exited
    assert lag < 0.1, f"released {lag * 1000:.0f} ms after the controller's exit\n{sup.output}"
    assert target.cluster.read_lease(EXAMPLE_LEASE)["spec"]["holderIdentity"] == ""
    assert "cut short" not in sup.output, sup.output
    reasons = [e["reason"] for e in target.cluster.list_events(reporting_controller=REPORTER)]
    assert "LeaseReleased" in reasons, reasons


@pytest.mark.parametrize("why", ["no time", "API down"])
async def test_a_release_that_cannot_happen_says_why(
    proxy: FaultProxy, kube: KubeTarget, tmp_path: Path, why: str
) -> None:
    ns = kube.cluster
    ns.run_pod("ctrl-0")
    ns.create_lease("leader", "ctrl-0_1")
    h = harness(kube, tmp_path, "ctrl-0", "lease_release: {process: controller, leases: [{name: leader}]}")
    deadline = Deadline(10)
    if why == "no time":
        deadline.expire("second SIGTERM")
    else:
        proxy.stop()
    with LogRecords.capture("kubernetes") as logs:
        await h.after_stop(deadline)
    warnings = logs.at(logging.WARNING)
    expected = "no time left" if why == "no time" else "unreachable"
    assert any("lease" in m and kube.namespace in m and expected in m for m in warnings), logs.messages
    assert ns.read_lease("leader")["spec"]["holderIdentity"] == "ctrl-0_1"


async def test_a_forbidden_release_is_a_warning_event(kube: KubeTarget, tmp_path: Path) -> None:
    target = example_setup(kube, tmp_path, example_rbac_without("coordination.k8s.io", "leases", "update"))
    h = harness(
        target,
        tmp_path,
        EXAMPLE_POD,
        f"events: true\nlease_release: {{process: controller, leases: [{{name: {EXAMPLE_LEASE}}}]}}",
    )
    with LogRecords.capture("kubernetes") as logs:
        await h.after_stop(Deadline(10))
    assert any("could not release lease" in m and "HTTP 403" in m for m in logs.at(logging.WARNING)), logs.messages
    events = [e for e in kube.cluster.list_events(reporting_controller=REPORTER) if e["reason"] == "LeaseNotReleased"]
    assert len(events) == 1, events
    assert events[0]["type"] == "Warning"
    assert EXAMPLE_LEASE in events[0]["note"] and "HTTP 403" in events[0]["note"], events[0]


async def test_a_drain_with_no_time_to_look_says_so(kube: KubeTarget, tmp_path: Path) -> None:
    """``--grace-period=2`` with ``propagation_delay: 2s``: the drain never
    lists a slice, and must not report counts it never saw."""
    ns = kube.cluster
    pod = ns.run_pod("web-0", ips=[IP], labels={"app": "web"})
    ns.create_service("web", {"app": "web"})
    ns.wait_endpoints("web", [pod])
    h = harness(kube, tmp_path, "web-0", "events: true\nendpoint_drain: {propagation_delay: 2s}")
    deadline = Deadline(30)
    with LogRecords.capture("kubernetes") as logs:
        ns.delete_pod("web-0", grace=2)
        await h.shutdown_started(deadline)
        await h.pre_stop(deadline)
    warnings = logs.at(logging.WARNING)
    assert any("did not look" in m and "grace period 2 s is shorter than propagation_delay 2 s" in m for m in warnings)
    assert not any("slices still route" in m for m in logs.messages), logs.messages
    assert _step(h.ctx, "endpoint drain").outcome == "skipped"  # type: ignore[attr-defined]
    notes = {e["reason"]: e for e in ns.list_events(reporting_controller=REPORTER)}
    assert "DrainTimedOut" not in notes, notes
    assert notes["DrainNotStarted"]["type"] == "Warning"
    assert "no time to look" in notes["DrainNotStarted"]["note"]


@pytest.mark.parametrize("keep_serving", [True, False])
async def test_the_last_serving_endpoint_keeps_serving_until_the_stops_need_the_time(
    kube: KubeTarget, tmp_path: Path, keep_serving: bool
) -> None:
    """No other endpoint is ready: kube-proxy keeps sending this pod traffic
    until it is gone, so stopping early only turns requests into errors.  The
    processes keep running until the stops (stop_timeout 2 s) and the steps
    after them need the rest, unless ``keep_serving: false``."""
    ns = kube.cluster
    pod = ns.run_pod("web-0", ips=[IP], labels={"app": "web"})
    ns.create_service("web", {"app": "web"})
    ns.wait_endpoints("web", [pod])
    h = harness(
        kube,
        tmp_path,
        "web-0",
        f"events: true\nendpoint_drain: {{propagation_delay: 0s, keep_serving: {str(keep_serving).lower()}}}",
    )
    deadline = Deadline(30)
    deadline.stop_time = 2.0  # what the plan sets for a stop_timeout of 2 s
    with LogRecords.capture("kubernetes") as logs:
        ns.delete_pod("web-0", grace=8)
        await h.shutdown_started(deadline)
        with trio.fail_after(15):
            await h.pre_stop(deadline)
    ended = trio.current_time()
    latest = deadline.at - deadline.reserve - deadline.kept - deadline.stop_time
    serving = [m for m in logs.at(logging.WARNING) if "keep serving" in m]
    events = {e["reason"]: e for e in ns.list_events(reporting_controller=REPORTER)}
    if keep_serving:
        # Until the latest moment (a busy machine can only make it later).
        assert latest - 0.1 <= ended < latest + 1.0, (ended - deadline.started, latest - deadline.started)
        assert serving and "last serving endpoint of Service web" in serving[0], logs.messages
        assert events["ServingUntilStop"]["type"] == "Warning"
        assert "Service web" in events["ServingUntilStop"]["note"]
        assert _step(h.ctx, "serving until the stops").outcome == "ok"  # type: ignore[attr-defined]
    else:
        assert ended < latest - 2, "waited although keep_serving is off"
        assert not serving, logs.messages
        assert "ServingUntilStop" not in events


async def test_in_a_pod_the_kubernetes_package_is_not_imported(kube: KubeTarget, tmp_path: Path) -> None:
    """A pod's plugin reads its pod through its own client: the package's
    models (about 30 MiB) are never loaded."""
    kube.cluster.run_pod("web-0", ips=[IP])
    script = f"""
import sys, trio
from supervisor import Settings
from supervisor_kubernetes._settings import KubernetesSettings
from supervisor_kubernetes._api import load_client, KubeAPI

async def main():
    client, _ = load_client(KubernetesSettings(service_account_dir={str(kube.service_account_dir)!r}))
    pod = await KubeAPI(client, request_timeout=5).read_pod({kube.namespace!r}, "web-0")
    print(pod["metadata"]["name"], "kubernetes" in sys.modules)

trio.run(main)
"""
    result = await trio.run_process(
        [sys.executable, "-c", script], capture_stdout=True, capture_stderr=True, env=kube.pod_env("web-0"), check=False
    )
    assert result.stdout.decode().split() == ["web-0", "False"], result.stderr.decode()


async def test_a_kubeconfig_run_outside_a_cluster_uses_the_kubernetes_package(
    kube: KubeTarget, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a kubeconfig (an admin's, outside any pod) the package reads it
    and the plugin's own client makes the calls."""
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST")
    kube.cluster.run_pod("web-0", ips=[IP])
    h = harness(kube, tmp_path, "web-0", f"kubeconfig: {kube.plane.admin_kubeconfig}")
    deadline = Deadline(30)
    kube.cluster.delete_pod("web-0", grace=20)
    await h.shutdown_started(deadline)
    assert _step(h.ctx, "read pod").outcome == "ok"  # type: ignore[attr-defined]
    assert deadline.reasons == ["pod deletion deadline"]


async def test_a_rotated_token_is_read_again(kube: KubeTarget, tmp_path: Path) -> None:
    """The kubelet rotates the projected token by swapping the directory the
    ``token`` symlink points into: the client reads the new one for the next
    call, without a restart."""
    ns = kube.cluster
    ns.run_pod("web-0", ips=[IP])
    token = kube.service_account_dir / "token"

    def rotate(text: str, generation: int) -> None:
        data = kube.service_account_dir / f"..{generation}"
        data.mkdir()
        (data / "token").write_text(text)
        link = kube.service_account_dir / f"token.{generation}"
        link.symlink_to(data / "token")
        link.replace(token)  # atomic, as the kubelet's rename of ..data

    rotate("not-a-token", 1)  # what the server no longer accepts
    h = harness(kube, tmp_path, "web-0", "")
    with LogRecords.capture("kubernetes") as logs:
        await h.background()
    assert any("HTTP 401" in m for m in logs.at(logging.WARNING)), logs.messages
    rotate(ns.token(), 2)  # a new token from the TokenRequest API
    deadline = Deadline(30)
    await h.shutdown_started(deadline)
    assert _step(h.ctx, "read pod").outcome == "ok"  # type: ignore[attr-defined]


@pytest.mark.slow
def test_the_last_serving_endpoint_serves_until_its_stop_timeout_needs_the_rest(
    kube: KubeTarget, tmp_path: Path
) -> None:
    """The whole plan, with the supervisor as PID 1: the pod is its
    Service's only endpoint and is deleted with ``--grace-period=12``; the
    controller (``stop_timeout: 3s``) keeps serving until the stop, the time
    kept for the Lease release and the reserve need the rest, and the Lease
    is still released before the kubelet's SIGKILL."""
    ns = kube.cluster
    pod = ns.run_pod("ctrl-0", ips=[IP], labels={"app": "web"})
    ns.create_service("web", {"app": "web"})
    ns.wait_endpoints("web", [pod])
    ns.create_lease("leader", "ctrl-0_1")
    stopped_file = tmp_path / "stopped"
    config = _controller_pod(
        tmp_path,
        stopped_file,
        kube.plugin_yaml,
        "endpoint_drain: {propagation_delay: 1s}",
        "lease_release: {process: controller, leases: [{name: leader}]}",
        stop_timeout="3s",
    )
    with Supervisor(["-c", str(config)], env=kube.pod_env("ctrl-0"), cwd=REPO) as sup:
        sup.wait_for("Services that select this pod: web", timeout=60)
        signalled = time.time()
        ns.delete_pod("ctrl-0", grace=12)
        sup.signal(signal.SIGTERM)
        assert sup.wait(20) == 0, sup.output
        finished = time.time()
    # SIGKILL 12 s after the deletion, less deadline_margin 1 s: the wall at
    # 11 s, the escalation 0.25 s before it; hooks keep the reserve (1 s)
    # and the release's time (1 s) back; the stop may take 3 s.
    stopped = float(stopped_file.read_text()) - signalled
    assert 11 - 0.25 - 1 - 1 - 3 - 0.3 <= stopped < 11 - 0.25 - 1 - 1 - 3 + 1.0, (
        f"SIGTERM at {stopped:.2f}s\n{sup.output}"
    )
    assert finished - signalled < 11.5, sup.output
    assert ns.read_lease("leader")["spec"]["holderIdentity"] == ""
    assert "last serving endpoint of Service web" in sup.output, sup.output
    reasons = {e["reason"] for e in ns.list_events(reporting_controller=REPORTER)}
    assert {"ServingUntilStop", "LeaseReleased"} <= reasons, reasons
