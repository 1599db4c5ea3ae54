"""A rolling update on the real node, as a user runs it: a Deployment of 3
replicas of the project's image (the supervisor as PID 1, a small HTTP app as
its main process) behind a ClusterIP Service that the real kube-proxy serves
in the node's namespace, 100 requests a second through the ClusterIP, each on
a new connection, and ``kubectl rollout restart``.

* With the supervisor's endpoint drain (configured as examples/kubernetes
  does, no preStop), not one request fails: each old pod keeps serving until
  kube-proxy has stopped sending it traffic.
* Without a preStop the same rollout drops requests (the old pod stopped
  listening at SIGTERM while kube-proxy still routed to it): the harness
  sees what users see, so the first test can fail.

The only timing assertions are generous bounds; the measured figures are
``make bench``'s (benchmarks/scenarios/rollout.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ._cluster import RealNode
from ._images import load_app_image
from ._rollout import CONFIGS, Rollout, run_rollout

pytestmark = [pytest.mark.xdist_group("real-node"), pytest.mark.slow]

REPLICAS = 3
RATE = 100.0
GRACE = 30
# Generous for a busy machine, where kube-proxy's sync can lag well beyond
# its 1 s minSyncPeriod; the benchmark runs with 2 s.
PROPAGATION_DELAY = 5.0


@pytest.fixture(scope="session")
def app_image(real_node: RealNode) -> str:
    return load_app_image(real_node)


def test_endpoint_drain_drops_no_request(real_node: RealNode, app_image: str, tmp_path: Path) -> None:
    result = run_rollout(
        real_node,
        app_image,
        CONFIGS["endpoint-drain"],
        Rollout(replicas=REPLICAS, rate=RATE, grace=GRACE, propagation_delay=PROPAGATION_DELAY),
        tmp_path,
    )
    report = result.summary()
    assert not result.problems, report
    assert result.sent >= 5 * RATE, report
    assert len(result.pods) == REPLICAS, report
    assert result.failed == 0, f"{report}\nfirst failures: {result.failures}"
    for pod in result.pods:
        assert pod.exit_status == 0, report  # the supervisor's own exit, not the SIGKILL
        # It stopped only once kube-proxy had let it go, and did not sit out
        # the grace period (generous bounds: a busy machine).
        assert pod.waste is not None and pod.waste >= 0, report
        assert pod.to_gone is not None and pod.to_gone < GRACE - 5, report


def test_without_prestop_the_rollout_drops_requests(real_node: RealNode, app_image: str, tmp_path: Path) -> None:
    result = run_rollout(
        real_node, app_image, CONFIGS["no-prestop"], Rollout(replicas=REPLICAS, rate=RATE, grace=GRACE), tmp_path
    )
    report = result.summary()
    assert not result.problems, report
    assert result.sent >= 5 * RATE, report
    assert len(result.pods) == REPLICAS, report
    # First that the app did exit at its SIGTERM: an app that served on
    # until its SIGKILL would drop nothing, for another reason.
    for pod in result.pods:
        assert pod.exit_status == 0, report
    assert result.failed > 0, report
    assert set(result.outcomes) - {"ok"} <= {"refused", "reset", "timeout"}, report
