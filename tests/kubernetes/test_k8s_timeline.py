"""The shutdown timeline a user reads in ``kubectl logs``, with the plugin
enabled, from the supervisor as PID 1 against the real control plane: a
hook with nothing to do (``supervisor.SKIP``) leaves no row, a hook that
worked leaves its row and the plugin's own steps."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from tests.kubernetes.k8s_helpers import REPO, KubeTarget
from tests.pid1 import Supervisor

pytestmark = pytest.mark.slow

LOOP = ["sh", "-c", "trap 'exit 0' TERM; while :; do sleep 0.05; done"]
LEASE = "controller-leader"


def _shutdown(kube: KubeTarget, tmp_path: Path, plugin: str) -> list[tuple[object, object, object]]:
    """Two processes, the plugin configured with ``plugin``; SIGTERM without
    a deletion (a liveness restart); the plugin's timeline rows."""
    config = tmp_path / "cfg.yaml"
    config.write_text(
        f"""
grace_period: 20s
log: {{format: json, level: debug}}
processes:
  - name: controller
    main: true
    command: {json.dumps(LOOP)}
  - name: sidecar
    command: {json.dumps(LOOP)}
plugins:
  kubernetes:
    {kube.plugin_yaml}
{plugin}"""
    )
    with Supervisor(["-c", str(config)], env=kube.pod_env("ctrl-0"), cwd=REPO) as sup:
        # The background hook has connected and read the pod.
        sup.wait_for("connected as pod", timeout=60)
        sup.signal(signal.SIGTERM)
        assert sup.wait(40) == 0, sup.output
    for record in sup.json_records():
        if "timeline" in record:
            steps = record["timeline"]
            return [(s["phase"], s["name"], s["outcome"]) for s in steps if s.get("plugin") == "kubernetes"]  # type: ignore[attr-defined]
    raise AssertionError(f"no timeline in the output\n{sup.output}")


def _pod_behind_web(kube: KubeTarget) -> None:
    ns = kube.cluster
    pod = ns.run_pod("ctrl-0", ips=["10.244.0.7"], labels={"app": "web"})
    ns.create_service("web", {"app": "web"})
    ns.wait_endpoints("web", [pod])
    ns.create_lease(LEASE, "ctrl-0_5d1e")


def test_rows_only_for_what_the_plugin_did(kube: KubeTarget, tmp_path: Path) -> None:
    _pod_behind_web(kube)
    rows = _shutdown(
        kube,
        tmp_path,
        f"    endpoint_drain: {{propagation_delay: 0s}}\n"
        f"    lease_release: {{process: controller, leases: [{{name: {LEASE}}}]}}\n",
    )
    # A hook that recorded steps of its own has no row besides them.
    assert rows == [
        ("shutdown_started", "read pod", "ok"),
        # Not being deleted: the drain says why it did not wait, and the
        # pre_stop hook itself, which did nothing, has no row of its own.
        ("pre_stop", "endpoint drain", "skipped"),
        # after_process_stop fires for both processes: only the Lease
        # holder's call did something.
        ("after_process_stop", f"release lease {kube.namespace}/{LEASE}", "ok"),
    ], rows
    assert kube.cluster.read_lease(LEASE)["spec"]["holderIdentity"] == ""


def test_a_feature_left_out_leaves_no_row(kube: KubeTarget, tmp_path: Path) -> None:
    _pod_behind_web(kube)
    rows = _shutdown(kube, tmp_path, "")
    assert rows == [("shutdown_started", "read pod", "ok")], rows
    assert kube.cluster.read_lease(LEASE)["spec"]["holderIdentity"] == "ctrl-0_5d1e"
