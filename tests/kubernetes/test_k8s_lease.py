"""Lease release after the holding process has exited, against the real API
server and real client-go electors (the controller-runtime manager): only
our own Lease, written as client-go's ReleaseOnCancel writes it, with 409
races handled."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from supervisor import Deadline
from tests.cluster import FaultProxy, Manager
from tests.kubernetes.k8s_helpers import (
    KubeTarget,
    controllers_held_until_the_plugin_looked,
    harness,
)
from tests.plugins._helpers import FakeProcess, LogRecords

LEASE = "controller-leader"
RETRY = 0.5  # the managers' RetryPeriod in these tests (controller-runtime's default is 2 s)
# The reportingController of the plugin's events.
REPORTER = "pid1-supervisor/kubernetes"


def _lease_section(extra: str = "") -> str:
    return f"lease_release:\n  process: controller\n  leases: [{{name: {LEASE}}}]\n  retries: 3\n{extra}"


@pytest.fixture
def managers(kube: KubeTarget, tmp_path: Path) -> Iterator[list[Manager]]:
    started: list[Manager] = []
    yield started
    for manager in started:
        manager.stop()


def _manager(kube: KubeTarget, managers: list[Manager], tmp_path: Path, pod: str) -> Manager:
    manager = Manager(
        kube.plane, kube.namespace, pod, lease=LEASE, retry_period=RETRY, log=tmp_path / f"{pod}.log"
    ).start()
    managers.append(manager)
    return manager


async def test_released_like_client_go_and_the_standby_takes_over(
    kube: KubeTarget, tmp_path: Path, managers: list[Manager]
) -> None:
    ns = kube.cluster
    ns.run_pod("ctrl-0")
    leader = _manager(kube, managers, tmp_path, "ctrl-0")
    leader.wait_leading()
    standby = _manager(kube, managers, tmp_path, "ctrl-1")
    standby.wait_trying()
    leader.stop()  # the controller exits; ReleaseOnCancel is off, so the Lease stays held
    before = ns.read_lease(LEASE)
    assert before["spec"]["holderIdentity"] == leader.identity
    h = harness(kube, tmp_path, "ctrl-0", _lease_section())
    releasing = time.time()
    with LogRecords.capture("kubernetes") as logs:
        await h.after_stop(Deadline(10))
    released_at = time.time()
    # Still the exited leader's when the plugin read it: the standby, trying
    # every retry period all along, never took the held Lease.
    assert any("released lease" in m and leader.identity in m for m in logs.messages), logs.messages
    # client-go retries every RetryPeriod plus up to 1.2 RetryPeriods of jitter; slack for a busy machine.
    acquired = standby.wait_leading(RETRY * 2.2 + 2.0)
    assert acquired >= releasing, "the standby took the Lease before it was released"
    assert acquired - released_at < RETRY * 2.2 + 1.0, (acquired, released_at)
    final = ns.read_lease(LEASE)["spec"]
    assert final["holderIdentity"] == standby.identity
    assert final["leaseTransitions"] == before["spec"]["leaseTransitions"] + 1


async def test_release_body_is_accepted_as_client_go_writes_it(kube: KubeTarget, tmp_path: Path) -> None:
    ns = kube.cluster
    ns.run_pod("ctrl-0")
    ns.create_lease(LEASE, "ctrl-0_6f1c2a")
    before = ns.read_lease(LEASE)
    h = harness(kube, tmp_path, "ctrl-0", _lease_section())
    await h.after_stop(Deadline(10))
    spec = ns.read_lease(LEASE)["spec"]
    assert spec["holderIdentity"] == ""
    assert spec["leaseDurationSeconds"] == 1
    assert spec["leaseTransitions"] == before["spec"]["leaseTransitions"]
    assert spec["acquireTime"] == spec["renewTime"]


async def test_lease_held_by_someone_else_is_left_alone(kube: KubeTarget, tmp_path: Path) -> None:
    ns = kube.cluster
    ns.run_pod("ctrl-0")
    ns.create_lease(LEASE, "ctrl-7_aaaa")
    ns.create_lease("ctrl-0-lookalike", "ctrl-0x_bbbb")
    before = ns.read_lease(LEASE)
    h = harness(
        kube,
        tmp_path,
        "ctrl-0",
        f"lease_release:\n  process: controller\n  leases: [{{name: {LEASE}}}, {{name: ctrl-0-lookalike}}]\n",
    )
    with LogRecords.capture("kubernetes") as logs:
        await h.after_stop(Deadline(10))
    assert ns.read_lease(LEASE)["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    assert ns.read_lease("ctrl-0-lookalike")["spec"]["holderIdentity"] == "ctrl-0x_bbbb"
    assert any("held by ctrl-7_aaaa, not by this pod: left alone" in m for m in logs.messages), logs.messages


async def test_exact_identity_setting(kube: KubeTarget, tmp_path: Path) -> None:
    ns = kube.cluster
    ns.run_pod("ctrl-0")
    ns.create_lease(LEASE, "ctrl-0_1234")
    ns.create_lease("other", "custom-identity")
    h = harness(
        kube,
        tmp_path,
        "ctrl-0",
        "lease_release:\n  process: controller\n"
        f"  leases: [{{name: {LEASE}}}, {{name: other}}]\n  identity: custom-identity\n",
    )
    await h.after_stop(Deadline(10))
    assert ns.read_lease(LEASE)["spec"]["holderIdentity"] == "ctrl-0_1234"
    assert ns.read_lease("other")["spec"]["holderIdentity"] == ""


async def test_leases_found_by_label_selector(kube: KubeTarget, tmp_path: Path) -> None:
    ns = kube.cluster
    ns.run_pod("ctrl-0")
    for name, team in (("a", "x"), ("b", "x"), ("c", "y")):
        ns.create_lease(name, "ctrl-0_1", labels={"team": team})
    h = harness(kube, tmp_path, "ctrl-0", "lease_release: {process: controller, selector: 'team in (x)'}")
    await h.after_stop(Deadline(10))
    assert ns.read_lease("a")["spec"]["holderIdentity"] == ""
    assert ns.read_lease("b")["spec"]["holderIdentity"] == ""
    assert ns.read_lease("c")["spec"]["holderIdentity"] == "ctrl-0_1"


async def test_a_409_race_with_a_renewing_elector_is_read_again_and_decided_again(
    proxy: FaultProxy, kube: KubeTarget, tmp_path: Path, managers: list[Manager]
) -> None:
    """The controller's last renew lands while the plugin's release is in
    flight: the real server answers 409, the plugin reads again and releases."""
    ns = kube.cluster
    ns.run_pod("ctrl-0")
    leader = _manager(kube, managers, tmp_path, "ctrl-0")
    leader.wait_leading()
    # Held back long enough for the live elector to renew (every RETRY s).
    proxy.slow(f"/leases/{LEASE}$", RETRY * 3, method="PUT", times=1)
    h = harness(kube, tmp_path, "ctrl-0", _lease_section())
    with LogRecords.capture("kubernetes") as logs:
        await h.after_stop(Deadline(10))
    statuses = [r.status for r in proxy.requests_matching("PUT", f"/leases/{LEASE}$")]
    assert statuses[0] == 409, statuses
    assert statuses[-1] == 200, statuses
    assert any("409 Conflict" in m for m in logs.messages), logs.messages
    assert any("released lease" in m for m in logs.messages), logs.messages


async def test_a_409_race_lost_to_a_new_holder_leaves_it_alone(
    proxy: FaultProxy, kube: KubeTarget, tmp_path: Path, managers: list[Manager]
) -> None:
    """Our Lease expires while the release is in flight and a standby's
    elector takes it: the re-read shows the new holder, left alone."""
    ns = kube.cluster
    ns.run_pod("ctrl-0")
    ns.create_lease(LEASE, "ctrl-0_6f1c2a", duration=2)
    proxy.slow(f"/leases/{LEASE}$", 4, method="PUT", times=1)
    standby = _manager(kube, managers, tmp_path, "ctrl-1")
    h = harness(kube, tmp_path, "ctrl-0", _lease_section())
    with LogRecords.capture("kubernetes") as logs:
        await h.after_stop(Deadline(15))
    assert standby.leading
    assert ns.read_lease(LEASE)["spec"]["holderIdentity"] == standby.identity
    assert [r.status for r in proxy.requests_matching("PUT", f"/leases/{LEASE}$")] == [409]
    assert any("not by this pod: left alone" in m for m in logs.messages), logs.messages


async def test_conflicts_beyond_the_retries_give_up(proxy: FaultProxy, kube: KubeTarget, tmp_path: Path) -> None:
    ns = kube.cluster
    ns.run_pod("ctrl-0")
    ns.create_lease(LEASE, "ctrl-0_6f1c2a")
    proxy.fail(f"/leases/{LEASE}$", 409, method="PUT")
    h = harness(kube, tmp_path, "ctrl-0", _lease_section().replace("retries: 3", "retries: 2"))
    with LogRecords.capture("kubernetes") as logs:
        await h.after_stop(Deadline(10))
    assert len(proxy.requests_matching("PUT", f"/leases/{LEASE}$")) == 3
    assert any("could not release" in m for m in logs.at(logging.WARNING)), logs.messages
    assert ns.read_lease(LEASE)["spec"]["holderIdentity"] == "ctrl-0_6f1c2a"


async def test_never_released_while_the_process_runs(kube: KubeTarget, tmp_path: Path) -> None:
    ns = kube.cluster
    ns.run_pod("ctrl-0")
    ns.create_lease(LEASE, "ctrl-0_6f1c2a")
    h = harness(kube, tmp_path, "ctrl-0", _lease_section())
    alive = FakeProcess("controller", pid=4242, running=True)
    deadline = Deadline(10)
    with LogRecords.capture("kubernetes") as logs:
        await h.plugin.supervisor_after_process_stop(ctx=h.ctx, deadline=deadline, process=alive, status=None)
    assert ns.read_lease(LEASE)["spec"]["holderIdentity"] == "ctrl-0_6f1c2a"
    assert any("still running" in m for m in logs.messages)


async def test_other_processes_do_not_release(kube: KubeTarget, tmp_path: Path) -> None:
    ns = kube.cluster
    ns.run_pod("ctrl-0")
    ns.create_lease(LEASE, "ctrl-0_6f1c2a")
    h = harness(kube, tmp_path, "ctrl-0", _lease_section())
    await h.after_stop(Deadline(10), process="sidecar")
    assert ns.read_lease(LEASE)["spec"]["holderIdentity"] == "ctrl-0_6f1c2a"


async def test_events_tell_the_story_in_kubectl_describe(kube: KubeTarget, tmp_path: Path) -> None:
    ns = kube.cluster
    pod = ns.run_pod("web-0", ips=["10.244.0.7"], labels={"app": "web"})
    # A second replica: web-0 is not the last serving endpoint (which would
    # keep serving until the stops).
    other = ns.run_pod("web-1", ips=["10.244.0.8"], labels={"app": "web"})
    ns.create_service("web", {"app": "web"})
    ns.wait_endpoints("web", [pod, other])
    ns.create_lease(LEASE, "web-0_77")
    h = harness(kube, tmp_path, "web-0", "events: true\nendpoint_drain: {propagation_delay: 0.2s}\n" + _lease_section())
    deadline = Deadline(30)
    with controllers_held_until_the_plugin_looked(kube.plane):
        ns.delete_pod("web-0")
        await h.shutdown_started(deadline)
        await h.pre_stop(deadline)
    await h.after_stop(deadline)
    # Reported by the plugin under its name, about the pod.
    events = ns.list_events(reporting_controller=REPORTER)
    reasons = [e["reason"] for e in events]
    assert {"DrainStarted", "DrainFinished", "LeaseReleased"} <= set(reasons), reasons
    for event in events:
        assert event["regarding"]["uid"] == pod["metadata"]["uid"]
    described = kube.plane.kubectl("describe", "pod", "web-0", "-n", ns.name)
    events_table = described.split("Events:", 1)[1]
    for reason in ("DrainStarted", "DrainFinished", "LeaseReleased"):
        assert reason in events_table, described


async def test_a_long_multibyte_note_is_cut_to_what_the_server_accepts(kube: KubeTarget, tmp_path: Path) -> None:
    """The server limits an Event's note to 1024 bytes; cut by characters,
    600 two-byte characters would be rejected whole (422)."""
    import logging as stdlib_logging

    from supervisor_kubernetes._connection import Connector
    from supervisor_kubernetes._events import EventRecorder

    ns = kube.cluster
    ns.run_pod("web-0")
    h = harness(kube, tmp_path, "web-0", "events: true")
    log = stdlib_logging.getLogger("test")
    connection = await Connector().connect(h.ctx.settings, log)  # type: ignore[arg-type]
    recorder = EventRecorder(connection.api, connection.pod, log)
    with LogRecords.capture("test") as logs:
        await recorder.record("DrainStarted", "é" * 600, action="Drain")
    assert logs.at(logging.WARNING) == [], logs.messages
    (event,) = ns.list_events(reporting_controller=REPORTER)
    assert event["note"] == "é" * 512 and len(event["note"].encode()) == 1024
