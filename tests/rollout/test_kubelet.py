"""The stand-in kubelet against the real API server, in the order a kubelet
keeps: bind, run, report Ready; on deletion the preStop hook, SIGTERM, SIGKILL
once the grace period is over, and the final delete that removes the Pod."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import pytest
from kubernetes import client

from tests.node import Node

pytestmark = [pytest.mark.xdist_group("rollout"), pytest.mark.slow]


def _pod(name: str, grace: int) -> dict[str, Any]:
    # PID 1 without a SIGTERM handler: the kernel drops the kubelet's SIGTERM,
    # so only the SIGKILL at the end of the grace period stops it.
    return {
        "metadata": {"name": name},
        "spec": {
            "terminationGracePeriodSeconds": grace,
            "automountServiceAccountToken": False,
            "containers": [
                {
                    "name": "main",
                    "image": "none",
                    "command": ["sleep", "600"],
                    "lifecycle": {"preStop": {"exec": {"command": ["sleep", "1"]}}},
                }
            ],
        },
    }


def test_a_deleted_pod_gets_its_prestop_then_sigterm_then_sigkill_at_the_grace_period(
    node: Node, admin_api: Any
) -> None:
    core = client.CoreV1Api(admin_api)
    namespace = f"kubelet-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": namespace}})
    node.kubelet.serve(namespace)
    try:
        core.create_namespaced_pod(namespace, _pod("stubborn", grace=3))
        key = f"{namespace}/stubborn"
        end = time.monotonic() + 120
        while (record := node.kubelet.records.get(key)) is None or record.ready is None:
            assert time.monotonic() < end and not node.kubelet.errors, node.kubelet.errors
            time.sleep(0.05)
        pod = json.loads(core.read_namespaced_pod("stubborn", namespace, _preload_content=False).data)
        assert pod["spec"]["nodeName"] == node.name
        assert pod["status"]["podIP"] == record.ip
        assert {c["type"]: c["status"] for c in pod["status"]["conditions"]}["Ready"] == "True"

        core.delete_namespaced_pod("stubborn", namespace)
        assert node.kubelet.wait_gone([key], timeout=120), record
        assert not record.problems and not node.kubelet.errors
        assert record.deleted is not None and record.prestop_done is not None and record.sigterm is not None
        assert record.sigkill is not None and record.exited is not None and record.gone is not None
        assert record.deleted < record.prestop_done <= record.sigterm < record.sigkill <= record.exited <= record.gone
        assert record.prestop_done - record.deleted >= 0.9  # preStop: sleep 1
        assert 2.9 <= record.sigkill - record.deleted < 3 + 10  # the grace period, generous on a busy machine
        listed = core.list_namespaced_pod(namespace).items
        assert listed == []  # the final delete removed it
    finally:
        core.delete_namespace(namespace)
