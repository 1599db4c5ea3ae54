"""A rolling update through the real kube-proxy under the real kubelet: does
it drop requests, and how much of the grace period does it waste?

The whole cluster with a real node (``tests/realnode``: etcd,
kube-apiserver, kube-controller-manager with the Deployment, ReplicaSet and
EndpointSlice controllers, kube-scheduler, kubelet v1.35.4, containerd
v2.3.7 with runc and the CNI bridge, kube-proxy in iptables mode), all in a
network namespace of its own.  The pods run the project's image (built by
``tools/build-image.sh`` with the kubernetes plugin) with the supervisor as
PID 1 and ``tests/node/app.py`` (which stops listening at SIGTERM) as its
main process.  A Deployment of 3 replicas behind a ClusterIP Service is
rolled with ``kubectl rollout restart`` (every pod replaced,
``maxSurge: 1, maxUnavailable: 0``) while the load generator sends 100
requests a second, each on a new connection, from the node's namespace to
the ClusterIP.  Three configurations of the same app in the same run:

* the supervisor with the Kubernetes plugin's ``endpoint_drain`` (the row's
  figure), ``propagation_delay`` 2 s;
* no preStop: the app gets SIGTERM at once;
* ``preStop: exec: [sleep, "15"]``, the classic.

Per configuration: requests sent and failed (refused, reset, timeouts, 5xx),
deletion (the API's watch event) → pod removed from the API, deletion →
kube-proxy's rules stopped naming the pod (read from ``iptables-save`` every
50 ms), and the grace-period waste, PID 1's exit (containerd's task-exit
event) less that moment."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from typing import Any

from .._bench import REPO, Bench
from .._results import Figure, Row, Target

__all__ = ["rolling_update"]

SCENARIO = "rolling update"
PROPAGATION_DELAY = 2.0
RATE = 100.0
NO_PRESTOP = "no preStop"
PRESTOP = "preStop: sleep 15"


def _unavailable() -> str | None:
    if os.geteuid() != 0:
        return "not measured: needs root (network namespaces, kubelet, containerd)"
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    try:
        import kubernetes  # noqa: F401

        import tests.realnode  # noqa: F401
    except ImportError as exc:
        return f"not measured: {exc} (needs tests/realnode and the kubernetes client)"
    return None


@contextlib.contextmanager
def _node(bench: Bench) -> Iterator[tuple[Any, str]]:
    """The real node (built and cached by tests/cluster/build.sh) with the
    app's image imported."""
    from tests.realnode import RealNode
    from tests.realnode._images import load_app_image

    with RealNode(bench.scratch("node")) as node:
        yield node, load_app_image(node)


def rolling_update(bench: Bench) -> list[Row]:
    replicas = 1 if bench.smoke else 3
    names = {
        "failed": f"requests failed in a rolling update of {replicas} pod{'s' if replicas > 1 else ''}"
        f" at {RATE:g} req/s through kube-proxy",
        "waste": "grace-period waste per old pod: PID 1's exit − kube-proxy stopped routing to it (worst)",
        "gone": "deletion → old pod gone (worst)",
        "unrouted": "deletion → kube-proxy's rules no longer name the pod (worst)",
    }
    targets = {
        "failed": Target("0", 0.0),
        "waste": Target(f"≤ {PROPAGATION_DELAY + 1:g} s (propagation_delay + 1 s)", PROPAGATION_DELAY + 1),
        "gone": Target(f"≤ {PROPAGATION_DELAY + 3:g} s", PROPAGATION_DELAY + 3),
        "unrouted": Target("— (the endpoint controller's and kube-proxy's own time)", None),
    }
    units = {"failed": "requests", "waste": "s", "gone": "s", "unrouted": "s"}
    reason = _unavailable()
    if reason:
        return [Row(SCENARIO, names[k], units[k], targets[k], Figure(note=reason)) for k in names]
    from tests.realnode._rollout import CONFIGS, Rollout, RolloutResult, run_rollout

    results: dict[str, RolloutResult | str] = {}
    try:
        with _node(bench) as (node, image):
            for key in ("endpoint-drain", "no-prestop", "prestop-sleep"):
                if bench.smoke and key == "prestop-sleep":
                    results[key] = "not measured: smoke run (it only sleeps 15 s)"
                    continue
                bench.say(f"  {CONFIGS[key].title}")
                try:
                    result = run_rollout(
                        node,
                        image,
                        CONFIGS[key],
                        Rollout(replicas=replicas, rate=RATE, propagation_delay=PROPAGATION_DELAY),
                        bench.scratch(key),
                    )
                except Exception as exc:  # one configuration's failure must not lose the others
                    results[key] = f"failed: {type(exc).__name__}: {str(exc).splitlines()[0]}"
                    continue
                results[key] = result
                bench.say("    " + result.summary().replace("\n", "\n    "))
    except Exception as exc:  # the cluster, the node or the image did not come up
        note = f"not measured: {type(exc).__name__}: {str(exc).splitlines()[0]}"
        return [Row(SCENARIO, names[k], units[k], targets[k], Figure(problems=[note])) for k in names]
    rows = []
    for key, measure in names.items():
        ours = _figure(results["endpoint-drain"], key)
        anchors = {NO_PRESTOP: _figure(results["no-prestop"], key), PRESTOP: _figure(results["prestop-sleep"], key)}
        rows.append(Row(SCENARIO, measure, units[key], targets[key], ours, anchors))
    return rows


def _figure(result: Any, key: str) -> Figure:
    """One configuration's figure.  Problems are the harness's own failures
    (a watch error, a SIGKILL, nothing measured); the requests a baseline
    drops are its measured outcome, in the value and the notes."""
    if isinstance(result, str):
        return Figure(note=result) if result.startswith("not measured") else Figure(problems=[result])
    problems = list(result.problems)
    killed = [pod.name for pod in result.pods if pod.killed]
    if killed:
        problems.append(f"SIGKILLed at the grace period: {', '.join(killed)}")
    if key == "failed":
        kinds = ", ".join(f"{n} {kind}" for kind, n in sorted(result.outcomes.items()) if kind != "ok")
        note = f"of {result.sent} sent" + (f" ({kinds})" if kinds else "")
        if result.slow:
            note += f"; {result.slow} more answered only after ≥ 1 s (a SYN to a pod already gone, retransmitted)"
        return Figure(float(result.failed), note, problems)
    attribute = {"waste": "waste", "gone": "to_gone", "unrouted": "to_unrouted"}[key]
    value, median = result.worst(attribute), result.median(attribute)
    if value is None:
        return Figure(None, "", [*problems, f"no {attribute} measured"])
    each = ", ".join("—" if v is None else f"{v:.2f}" for v in (getattr(pod, attribute) for pod in result.pods))
    note = f"median {median:.2f} s of {len(result.pods)} pods (each: {each})"
    # A fast shutdown that drops requests is not a fast shutdown: each row
    # of a configuration that dropped some says so.
    dropped = f"; {result.failed} of {result.sent} requests failed" if result.failed else ""
    if key == "waste" and value < 0:
        # Exiting before the rules let go wastes nothing: it is the race itself.
        return Figure(
            None,
            f"no waste: every pod exited while kube-proxy still routed to it ({-value:.2f} s at least){dropped}",
            problems,
        )
    return Figure(value, note + dropped, problems)
