"""The issue's scenario, end to end, with the supervisor as PID 1 and a real
controller-runtime manager (leader election on, ReleaseOnCancel off) as its
main process, on the real control plane.

The pod is behind a Service; it is deleted; then the order must be: the drain
ends only after the EndpointSlice controller flipped the endpoint and
propagation_delay passed, then the manager gets SIGTERM and exits, then the
Lease is released, and the standby manager leads within its retry period.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from tests.cluster import Manager, manager_command, read_report
from tests.kubernetes.k8s_helpers import LOOKED, REPO, KubeTarget, controllers_held
from tests.pid1 import Supervisor

pytestmark = pytest.mark.slow

LEASE = "controller-leader"
RETRY = 0.5  # both managers' RetryPeriod
PROPAGATION = 1.0
IP = "10.244.0.7"


def _config(kube: KubeTarget, tmp_path: Path, report: Path) -> Path:
    command = manager_command(
        kube.plane,
        kube.namespace,
        lease=LEASE,
        retry_period=RETRY,
        kubeconfig=kube.plane.admin_kubeconfig,
        report=report,
    )
    path = tmp_path / "cfg.yaml"
    path.write_text(
        f"""
grace_period: 30s
log: {{format: text, level: debug}}
processes:
  - name: controller
    main: true
    command: {command}
    stop_timeout: 10s
plugins:
  kubernetes:
    {kube.plugin_yaml}
    events: true
    endpoint_drain:
      services: [web]
      propagation_delay: {PROPAGATION}s
      fallback_delay: 20s
    lease_release:
      process: controller
      leases: [{{name: {LEASE}}}]
"""
    )
    return path


def _supervise(kube: KubeTarget, tmp_path: Path, report: Path) -> Supervisor:
    """The supervisor as PID 1, once its manager leads and the plugin has read its pod."""
    sup = Supervisor(["-c", str(_config(kube, tmp_path, report))], env=kube.pod_env("ctrl-0"), cwd=REPO)
    deadline = time.monotonic() + 60
    # A pod runs for a while before it is deleted: the plugin's background
    # hook has loaded the client and read the pod long before.
    while "leading" not in read_report(report) or "connected as pod" not in sup.output:
        if time.monotonic() > deadline or sup.proc.poll() is not None:
            sup.kill()
            raise AssertionError(f"the manager never led\n{sup.output}")
        time.sleep(0.05)
    return sup


def _pod_behind_web(kube: KubeTarget) -> None:
    """ctrl-0 and the standby's pod behind Service web: ctrl-0 is not its
    last serving endpoint, which would keep serving until the stops."""
    ns = kube.cluster
    pod = ns.run_pod("ctrl-0", ips=[IP], labels={"app": "web"}, grace=30)
    standby = ns.run_pod("ctrl-1", ips=["10.244.0.8"], labels={"app": "web"}, grace=30)
    ns.create_service("web", {"app": "web"})
    ns.wait_endpoints("web", [pod, standby])


def test_pod_deletion_drains_then_stops_then_hands_over_the_lease(kube: KubeTarget, tmp_path: Path) -> None:
    ns = kube.cluster
    _pod_behind_web(kube)
    report = tmp_path / "controller.jsonl"
    standby_log = tmp_path / "standby.log"
    standby = Manager(kube.plane, ns.name, "ctrl-1", lease=LEASE, retry_period=RETRY, log=standby_log)
    with _supervise(kube, tmp_path, report) as sup:
        standby.start()
        ns.on_cleanup(standby.stop)
        standby.wait_trying()
        watch = ns.watch_slices(ns.kubelet.read_pod("ctrl-0"))
        # The controller reacts once the plugin has seen the endpoint route,
        # so that the drain waits for the flip rather than finding it done.
        with controllers_held(kube.plane, lambda: LOOKED in sup.output):
            ns.delete_pod("ctrl-0")
            sup.signal(signal.SIGTERM)  # the kubelet, at the same moment
            code = sup.wait(40)
        flipped_mono = watch.wait_flipped()
        acquired = standby.wait_leading(10)
    # Wall clock and monotonic clock: the flip as seen, in wall-clock terms.
    flipped = time.time() - (time.monotonic() - flipped_mono)
    assert code == 0, sup.output
    events = read_report(report)
    # 1. The manager was asked to stop only after the flip and the propagation delay.
    assert events["stopping"] >= flipped + PROPAGATION - 0.1, (events, flipped, sup.output)
    assert events["stopping"] < flipped + PROPAGATION + 3, (events, flipped, sup.output)
    assert LOOKED in sup.output, "the drain never saw the endpoint route"
    # 2. It exited (without releasing: ReleaseOnCancel is off), then the plugin released.
    assert "stopped" in events, events
    assert "released lease" in sup.output
    # The standby, trying every retry period since before the deletion, took
    # the Lease only once its holder had exited: never a held one.
    assert acquired >= events["stopped"], (acquired, events)
    # 3. The standby led within its jittered retry (up to 2.2 retry periods) plus slack, not after 15 s.
    assert acquired - events["stopped"] < RETRY * 2.2 + 1.5, (acquired, events)
    reasons = {e["reason"] for e in ns.list_events()}
    assert {"DrainStarted", "DrainFinished", "LeaseReleased"} <= reasons, reasons


def test_sigterm_without_deletion_skips_the_drain(kube: KubeTarget, tmp_path: Path) -> None:
    """A liveness restart: the pod stays in its Service, so no drain wait."""
    _pod_behind_web(kube)
    report = tmp_path / "controller.jsonl"
    with _supervise(kube, tmp_path, report) as sup:
        signalled = time.time()
        sup.signal(signal.SIGTERM)
        code = sup.wait(40)
    assert code == 0, sup.output
    events = read_report(report)
    assert events["stopping"] - signalled < 3, f"the manager waited for a drain (fallback is 20 s)\n{sup.output}"
    assert "skipping the endpoint drain" in sup.output
    assert kube.cluster.read_lease(LEASE)["spec"]["holderIdentity"] == ""


def test_the_pods_deadline_is_honoured(kube: KubeTarget, tmp_path: Path) -> None:
    """kubectl delete --grace-period=4 while grace_period is 30s and the
    controller never flips the endpoints (held until the end):
    everything must be over before the kubelet's SIGKILL."""
    _pod_behind_web(kube)
    report = tmp_path / "controller.jsonl"
    # Held for as long as the supervisor runs: the flip never comes.
    with _supervise(kube, tmp_path, report) as sup, controllers_held(kube.plane, lambda: False, limit=45):
        deleted = time.monotonic()
        kube.cluster.delete_pod("ctrl-0", grace=4)
        sup.signal(signal.SIGTERM)
        sup.wait(40)
        finished = time.monotonic()
    assert finished - deleted < 4.5, f"the supervisor outlived the pod's grace period\n{sup.output}"
    assert "deadline shortened" in sup.output
    assert "endpoint drain timed out" in sup.output, sup.output
    assert "stopping" in read_report(report), "the manager was never asked to stop"
