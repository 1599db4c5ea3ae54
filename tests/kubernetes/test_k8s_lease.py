"""Lease release after the holding process has exited: only our own Lease,
written as client-go's ReleaseOnCancel writes it, with 409 races handled."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

import trio

from supervisor import Deadline
from tests.kubeapi import KubeAPIServer, micro_time
from tests.kubernetes.k8s_helpers import KubeTarget, harness
from tests.plugins._helpers import FakeProcess, LogRecords

LEASE = "controller-leader"


def _lease_section(extra: str = "") -> str:
    return f"lease_release:\n  process: controller\n  leases: [{{name: {LEASE}}}]\n  retries: 3\n{extra}"


async def test_released_like_client_go_and_the_standby_takes_over(kube: KubeTarget, tmp_path: Path) -> None:
    cluster = kube.cluster
    cluster.create_pod("ctrl-0")
    leader = cluster.elector(LEASE, "ctrl-0_6f1c2a", retry_period=0.3).start()
    leader.wait_until_leading()
    standby = cluster.elector(LEASE, "ctrl-1_98ab01", retry_period=0.5).start()
    await trio.sleep(1.0)
    assert not standby.leading, "the standby took a Lease that is held and valid"
    leader.stop()  # the controller exits without ReleaseOnCancel
    before = cluster.read_lease(LEASE)
    h = harness(kube, tmp_path, "ctrl-0", _lease_section())
    with LogRecords.capture("kubernetes") as logs:
        await h.after_stop(Deadline(10))
    released_at = time.monotonic()
    assert any("released lease" in m and "ctrl-0_6f1c2a" in m for m in logs.messages), logs.messages
    spec = cluster.read_lease(LEASE)["spec"]
    if spec["holderIdentity"] != "ctrl-1_98ab01":  # the standby has not taken it yet
        assert spec["holderIdentity"] == ""
        assert spec["leaseDurationSeconds"] == 1
        assert spec["leaseTransitions"] == before["spec"]["leaseTransitions"]
        assert spec["acquireTime"] == spec["renewTime"]
    if kube.fake is not None:  # the write itself, whoever came next
        (release,) = [
            r.body["spec"]
            for r in kube.fake.requests_matching("PUT", f"/leases/{LEASE}$")
            if r.body["spec"].get("holderIdentity") == ""
        ]
        assert release["leaseDurationSeconds"] == 1
        assert release["leaseTransitions"] == before["spec"]["leaseTransitions"]
    # client-go retries every RetryPeriod with jitter 1.2: 0.6 s here, plus slack.
    deadline = released_at + 0.5 * 1.2 + 1.0
    while not standby.leading and time.monotonic() < deadline:
        await trio.sleep(0.02)
    assert standby.leading, "the standby did not acquire the released Lease within its retry period"
    final = cluster.read_lease(LEASE)["spec"]
    assert final["holderIdentity"] == "ctrl-1_98ab01"
    assert final["leaseTransitions"] == before["spec"]["leaseTransitions"] + 1


async def test_lease_held_by_someone_else_is_left_alone(kube: KubeTarget, tmp_path: Path) -> None:
    cluster = kube.cluster
    cluster.create_pod("ctrl-0")
    cluster.create_lease(LEASE, "ctrl-7_aaaa")
    cluster.create_lease("ctrl-0-lookalike", "ctrl-0x_bbbb")
    before = cluster.read_lease(LEASE)
    h = harness(
        kube,
        tmp_path,
        "ctrl-0",
        f"lease_release:\n  process: controller\n  leases: [{{name: {LEASE}}}, {{name: ctrl-0-lookalike}}]\n",
    )
    with LogRecords.capture("kubernetes") as logs:
        await h.after_stop(Deadline(10))
    assert cluster.read_lease(LEASE)["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    assert cluster.read_lease("ctrl-0-lookalike")["spec"]["holderIdentity"] == "ctrl-0x_bbbb"
    assert any("held by ctrl-7_aaaa, not by this pod: left alone" in m for m in logs.messages), logs.messages


async def test_exact_identity_setting(kube: KubeTarget, tmp_path: Path) -> None:
    cluster = kube.cluster
    cluster.create_pod("ctrl-0")
    cluster.create_lease(LEASE, "ctrl-0_1234")
    cluster.create_lease("other", "custom-identity")
    h = harness(
        kube,
        tmp_path,
        "ctrl-0",
        "lease_release:\n  process: controller\n"
        f"  leases: [{{name: {LEASE}}}, {{name: other}}]\n  identity: custom-identity\n",
    )
    await h.after_stop(Deadline(10))
    assert cluster.read_lease(LEASE)["spec"]["holderIdentity"] == "ctrl-0_1234"
    assert cluster.read_lease("other")["spec"]["holderIdentity"] == ""


async def test_leases_found_by_label_selector(kube: KubeTarget, tmp_path: Path) -> None:
    cluster = kube.cluster
    cluster.create_pod("ctrl-0")
    for name, holder, team in (
        ("a", "ctrl-0_1", "x"),
        ("b", "ctrl-0_1", "x"),
        ("c", "ctrl-0_1", "y"),
    ):
        lease = cluster.create_lease(name, holder)
        lease["metadata"]["labels"] = {"team": team}
        cluster.coordination.replace_namespaced_lease(name, cluster.namespace, lease)
    h = harness(kube, tmp_path, "ctrl-0", "lease_release: {process: controller, selector: 'team in (x)'}")
    await h.after_stop(Deadline(10))
    assert cluster.read_lease("a")["spec"]["holderIdentity"] == ""
    assert cluster.read_lease("b")["spec"]["holderIdentity"] == ""
    assert cluster.read_lease("c")["spec"]["holderIdentity"] == "ctrl-0_1"


async def test_a_409_race_is_read_again_and_decided_again(
    fake: KubeAPIServer, kube: KubeTarget, tmp_path: Path
) -> None:
    cluster = kube.cluster
    cluster.create_pod("ctrl-0")
    cluster.create_lease(LEASE, "ctrl-0_6f1c2a")
    # The plugin's first PUT is held back while another write lands first
    # (the controller's last renew, still in flight).
    gate = fake.slow(f"/leases/{LEASE}$", 0.5, method="PUT", times=1)

    def renew_meanwhile() -> None:
        while gate.fired == 0:
            time.sleep(0.005)
        lease = cluster.read_lease(LEASE)
        lease["spec"]["renewTime"] = micro_time()
        cluster.coordination.replace_namespaced_lease(LEASE, cluster.namespace, lease)

    racer = threading.Thread(target=renew_meanwhile)
    racer.start()
    h = harness(kube, tmp_path, "ctrl-0", _lease_section())
    with LogRecords.capture("kubernetes") as logs:
        await h.after_stop(Deadline(10))
    racer.join(5)
    statuses = [r.status for r in fake.requests_matching("PUT", f"/leases/{LEASE}$")]
    assert 409 in statuses, statuses
    assert statuses[-1] == 200
    assert cluster.read_lease(LEASE)["spec"]["holderIdentity"] == ""
    assert any("409 Conflict" in m for m in logs.messages), logs.messages


async def test_a_409_race_lost_to_a_new_holder_leaves_it_alone(
    fake: KubeAPIServer, kube: KubeTarget, tmp_path: Path
) -> None:
    cluster = kube.cluster
    cluster.create_pod("ctrl-0")
    cluster.create_lease(LEASE, "ctrl-0_6f1c2a")
    gate = fake.slow(f"/leases/{LEASE}$", 0.5, method="PUT", times=1)

    def standby_takes_it() -> None:
        while gate.fired == 0:
            time.sleep(0.005)
        lease = cluster.read_lease(LEASE)
        lease["spec"]["holderIdentity"] = "ctrl-1_98ab01"
        cluster.coordination.replace_namespaced_lease(LEASE, cluster.namespace, lease)

    racer = threading.Thread(target=standby_takes_it)
    racer.start()
    h = harness(kube, tmp_path, "ctrl-0", _lease_section())
    await h.after_stop(Deadline(10))
    racer.join(5)
    assert cluster.read_lease(LEASE)["spec"]["holderIdentity"] == "ctrl-1_98ab01"


async def test_conflicts_beyond_the_retries_give_up(fake: KubeAPIServer, kube: KubeTarget, tmp_path: Path) -> None:
    cluster = kube.cluster
    cluster.create_pod("ctrl-0")
    cluster.create_lease(LEASE, "ctrl-0_6f1c2a")
    fake.fail(f"/leases/{LEASE}$", 409, method="PUT")
    h = harness(kube, tmp_path, "ctrl-0", _lease_section().replace("retries: 3", "retries: 2"))
    with LogRecords.capture("kubernetes") as logs:
        await h.after_stop(Deadline(10))
    assert len(fake.requests_matching("PUT", f"/leases/{LEASE}$")) == 3
    assert any("could not release" in m for m in logs.at(logging.WARNING)), logs.messages
    assert cluster.read_lease(LEASE)["spec"]["holderIdentity"] == "ctrl-0_6f1c2a"


async def test_never_released_while_the_process_runs(kube: KubeTarget, tmp_path: Path) -> None:
    cluster = kube.cluster
    cluster.create_pod("ctrl-0")
    cluster.create_lease(LEASE, "ctrl-0_6f1c2a")
    h = harness(kube, tmp_path, "ctrl-0", _lease_section())
    alive = FakeProcess("controller", pid=4242, running=True)
    deadline = Deadline(10)
    with LogRecords.capture("kubernetes") as logs:
        await h.plugin.supervisor_after_process_stop(ctx=h.ctx, deadline=deadline, process=alive, status=None)
    assert cluster.read_lease(LEASE)["spec"]["holderIdentity"] == "ctrl-0_6f1c2a"
    assert any("still running" in m for m in logs.messages)


async def test_other_processes_do_not_release(kube: KubeTarget, tmp_path: Path) -> None:
    cluster = kube.cluster
    cluster.create_pod("ctrl-0")
    cluster.create_lease(LEASE, "ctrl-0_6f1c2a")
    h = harness(kube, tmp_path, "ctrl-0", _lease_section())
    await h.after_stop(Deadline(10), process="sidecar")
    assert cluster.read_lease(LEASE)["spec"]["holderIdentity"] == "ctrl-0_6f1c2a"


async def test_events_tell_the_story(kube: KubeTarget, tmp_path: Path) -> None:
    cluster = kube.cluster
    pod = cluster.create_pod("web-0", ip="10.0.0.7")
    from tests.kubeapi import pod_endpoints

    cluster.create_service("web", [pod_endpoints(pod, "10.0.0.7")])
    cluster.create_lease(LEASE, "web-0_77")
    h = harness(
        kube,
        tmp_path,
        "web-0",
        "events: true\nendpoint_drain: {propagation_delay: 0.2s}\n" + _lease_section(),
    )
    cluster.delete_pod_and_flip("web-0", flip_after=0.5)
    deadline = Deadline(30)
    await h.shutdown_started(deadline)
    await h.pre_stop(deadline)
    await h.after_stop(deadline)
    events = cluster.list_events()
    reasons = [e["reason"] for e in events]
    assert {"DrainStarted", "DrainFinished", "LeaseReleased"} <= set(reasons), reasons
    for event in events:
        assert event["regarding"]["uid"] == pod["metadata"]["uid"]
        assert event["reportingController"] == "pid1-supervisor/kubernetes"
