"""The issue's scenario, end to end, with the supervisor as PID 1.

A fake controller holds a leader Lease and the pod is behind a Service; the
pod is deleted; then the order must be: the drain ends only after the
endpoint flipped and propagation_delay passed, then the controller gets
SIGTERM and exits, then the Lease is released, and a standby acquires it
within its retry period.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest

from tests.kubeapi import pod_endpoints
from tests.kubernetes.k8s_helpers import KubeTarget
from tests.pid1 import Supervisor

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
LEASE = "controller-leader"
RETRY = 0.5  # the standby's RetryPeriod
PROPAGATION = 1.0


def _config(kube: KubeTarget, tmp_path: Path, report: Path) -> Path:
    connection = (
        f"--kubeconfig={kube.kubeconfig}" if kube.kubeconfig else f"--service-account-dir={kube.service_account_dir}"
    )
    path = tmp_path / "cfg.yaml"
    path.write_text(
        f"""
grace_period: 30s
log: {{format: text, level: info}}
processes:
  - name: controller
    main: true
    command:
      - {sys.executable}
      - -m
      - tests.kubeapi.controller
      - --namespace={kube.namespace}
      - --lease={LEASE}
      - --identity=${{POD_NAME}}_4f2a9c
      - --report={report}
      - --retry-period=0.3
      - {connection}
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


def _report(path: Path) -> dict[str, float]:
    events: dict[str, float] = {}
    for line in path.read_text().splitlines():
        name, at, _pid = line.split()
        events.setdefault(name, float(at))
    return events


def _supervise(kube: KubeTarget, tmp_path: Path, report: Path) -> Supervisor:
    """The supervisor as PID 1, once its controller leads."""
    env = {
        **kube.env,
        "POD_NAME": "ctrl-0",
        "POD_NAMESPACE": kube.namespace,
        "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
    }
    sup = Supervisor(["-c", str(_config(kube, tmp_path, report))], env=env, cwd=REPO)
    deadline = time.monotonic() + 30
    while not (report.exists() and "leading" in report.read_text()):
        if time.monotonic() > deadline or sup.proc.poll() is not None:
            sup.kill()
            raise AssertionError(f"the controller never led\n{sup.output}")
        time.sleep(0.05)
    # A pod runs for a while before it is deleted: let the plugin's background
    # hook load the client and read the pod, as it would have long before.
    if kube.fake is not None:
        while not kube.fake.requests_matching("GET", "/pods/ctrl-0$"):
            if time.monotonic() > deadline:
                sup.kill()
                raise AssertionError(f"the plugin never read its pod\n{sup.output}")
            time.sleep(0.05)
    else:
        time.sleep(3)
    return sup


def test_pod_deletion_drains_then_stops_then_hands_over_the_lease(kube: KubeTarget, tmp_path: Path) -> None:
    cluster = kube.cluster
    pod = cluster.create_pod("ctrl-0", grace=30, ip="10.0.0.7")
    cluster.create_service("web", [pod_endpoints(pod, "10.0.0.7")])
    report = tmp_path / "controller.txt"
    with _supervise(kube, tmp_path, report) as sup:
        standby = cluster.elector(LEASE, "ctrl-1_77e0b1", retry_period=RETRY).start()
        time.sleep(1.0)
        assert not standby.leading, "the standby took a held Lease"

        deletion = cluster.delete_pod_and_flip("ctrl-0", flip_after=1.5)
        sup.signal(signal.SIGTERM)  # the kubelet, at the same moment
        code = sup.wait(40)
        flipped = deletion.wait_flipped()
        standby_deadline = time.monotonic() + 5
        while not standby.leading and time.monotonic() < standby_deadline:
            time.sleep(0.02)

    assert code == 0, sup.output
    events = _report(report)
    # 1. The controller was asked to stop only after the flip and the propagation delay.
    assert events["sigterm"] >= flipped + PROPAGATION, (events, flipped, sup.output)
    assert events["sigterm"] < flipped + PROPAGATION + 3, (events, flipped, sup.output)
    # 2. It exited, then the Lease was released (written with holder "").
    assert "exit" in events, events
    if kube.fake is not None:
        releases = [
            r
            for r in kube.fake.requests_matching("PUT", f"/leases/{LEASE}$")
            if r.status == 200 and r.body["spec"].get("holderIdentity") == ""
        ]
        assert len(releases) == 1, sup.output
        released_at = releases[0].at
        assert released_at > events["exit"], (released_at, events)
    else:
        released_at = events["exit"]
    # 3. The standby took over within its retry period (x1.2 jitter) plus slack.
    assert standby.leading, f"the standby never acquired the Lease\n{sup.output}"
    assert standby.acquired_at is not None
    assert standby.acquired_at - released_at < RETRY * 1.2 + 0.5, (standby.acquired_at, released_at)
    assert "released lease" in sup.output
    reasons = {e["reason"] for e in cluster.list_events()}
    assert {"DrainStarted", "DrainFinished", "LeaseReleased"} <= reasons, reasons


def test_sigterm_without_deletion_skips_the_drain(kube: KubeTarget, tmp_path: Path) -> None:
    """A liveness restart: the pod stays in its Service, so no drain wait."""
    cluster = kube.cluster
    pod = cluster.create_pod("ctrl-0", grace=30, ip="10.0.0.7")
    cluster.create_service("web", [pod_endpoints(pod, "10.0.0.7")])
    report = tmp_path / "controller.txt"
    with _supervise(kube, tmp_path, report) as sup:
        signalled = time.monotonic()
        sup.signal(signal.SIGTERM)
        code = sup.wait(40)
    assert code == 0, sup.output
    events = _report(report)
    assert events["sigterm"] - signalled < 3, "the controller waited for a drain (fallback is 20 s)"
    assert "skipping the endpoint drain" in sup.output
    assert cluster.read_lease(LEASE)["spec"]["holderIdentity"] == ""


def test_the_pods_deadline_is_honoured(kube: KubeTarget, tmp_path: Path) -> None:
    """kubectl delete --grace-period=4 while grace_period is 30s and the
    endpoints never flip: everything must be over before the kubelet's SIGKILL."""
    cluster = kube.cluster
    pod = cluster.create_pod("ctrl-0", grace=30, ip="10.0.0.7")
    cluster.create_service("web", [pod_endpoints(pod, "10.0.0.7")])
    report = tmp_path / "controller.txt"
    with _supervise(kube, tmp_path, report) as sup:
        deleted = time.monotonic()
        cluster.delete_pod("ctrl-0", grace=4)
        sup.signal(signal.SIGTERM)
        sup.wait(40)
        finished = time.monotonic()
    assert finished - deleted < 4.5, f"the supervisor outlived the pod's grace period\n{sup.output}"
    assert "deadline shortened" in sup.output
    assert "endpoint drain timed out" in sup.output, sup.output
    events = _report(report)
    assert "sigterm" in events, "the controller was never asked to stop"
