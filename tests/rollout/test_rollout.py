"""A rolling update through the real kube-proxy, as a user sees it: one pod
of a Deployment replaced (the real Deployment and EndpointSlice controllers)
while a load generator sends 200 requests a second to the Service's
ClusterIP from the node, each on a new connection.

* With the supervisor's endpoint drain, not one request fails: the old pod
  keeps serving until kube-proxy has stopped sending it traffic.
* Without any preStop the same rollout drops requests (connections refused
  by the old pod, which stopped listening at SIGTERM while kube-proxy still
  routed to it): the harness sees what users see, so the first test can fail.

The only timing assertions are generous bounds; the measured figures are
``make bench``'s (benchmarks/scenarios/rollout.py).
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.node import CONFIGS, Node, Rollout, run_rollout

pytestmark = [pytest.mark.xdist_group("rollout"), pytest.mark.slow]

RATE = 200.0
GRACE = 30
# Generous for a busy machine, where kube-proxy's sync can lag well beyond
# its 1 s minSyncPeriod; the benchmark runs with 2 s.
PROPAGATION_DELAY = 5.0


def test_endpoint_drain_drops_no_request(node: Node, admin_api: Any) -> None:
    result = run_rollout(
        node,
        admin_api,
        CONFIGS["endpoint-drain"],
        Rollout(replicas=1, rate=RATE, grace=GRACE, propagation_delay=PROPAGATION_DELAY),
    )
    report = result.summary()
    assert not result.problems, report
    assert result.sent >= 100, report
    assert result.failed == 0, f"{report}\nfirst failures: {result.failures}"
    [old] = result.pods
    assert old.exit_status == 0 and not old.killed, report
    # It did not sit out the grace period (a generous bound: a busy machine).
    assert old.to_gone is not None and old.to_gone < GRACE - 5, report


def test_without_prestop_the_rollout_drops_requests(node: Node, admin_api: Any) -> None:
    result = run_rollout(node, admin_api, CONFIGS["no-prestop"], Rollout(replicas=1, rate=RATE, grace=GRACE))
    report = result.summary()
    assert not result.problems, report
    assert result.sent >= 100, report
    # First that the app did exit at its SIGTERM: an app that served on
    # until its SIGKILL would drop nothing, for another reason.
    [old] = result.pods
    assert old.exit_status == 0 and not old.killed, report
    assert result.failed > 0, report
    assert set(result.outcomes) - {"ok"} <= {"refused", "reset", "timeout"}, report
