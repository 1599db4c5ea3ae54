"""An image whose ``STOPSIGNAL`` is SIGQUIT (as nginx's is), under the real
kubelet: containerd stops its containers with SIGQUIT, not SIGTERM.  The
supervisor is told so (``shutdown_signals: [QUIT]``), so the kubelet's stop
signal starts its shutdown plan: the endpoint drain runs (``DrainStarted``,
``DrainFinished`` among the pod's Events), the app gets its own stop signal
only once the pod has left the Service's EndpointSlice, and the supervisor
exits 0 before the grace period ends.

Needs the ``shutdown_signals`` key: a supervisor without it refuses the
configuration (the pod never becomes Ready) or, if the key were ignored,
would forward SIGQUIT to the app instead of draining; either way this
test fails.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ._cluster import RealNode, namespace
from ._images import load_quit_image
from ._manifests import config_map, pod_spec, service, supervisor_access, supervisor_yaml
from ._timeline import PodWatch, SliceWatch, TaskExits, follow_log, logged_at

pytestmark = [pytest.mark.xdist_group("real-node"), pytest.mark.slow]

GRACE = 30
PROPAGATION_DELAY = 2.0
APP_SIGTERM = "SIGTERM: not listening any more"  # tests/node/app.py


def _restarted(pods: PodWatch) -> bool:
    track = pods.tracks.get("quit")
    statuses = (track.last.get("status", {}).get("containerStatuses") or []) if track else []
    return any(status.get("restartCount", 0) > 0 for status in statuses)


def test_the_kubelets_sigquit_starts_the_plan_and_the_drain(real_node: RealNode, tmp_path: Path) -> None:
    image = load_quit_image(real_node)
    labels = {"app": "quit"}
    supervisor = supervisor_yaml(
        GRACE, drain_service="quit", propagation_delay=PROPAGATION_DELAY, extra="shutdown_signals: [QUIT]"
    )
    objects = [
        *supervisor_access(),
        config_map("quit", supervisor),
        service("quit", labels),
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "quit", "labels": labels},
            "spec": pod_spec(image, "quit", GRACE),
        },
    ]
    with (
        namespace(real_node, "stop-signal") as ns,
        PodWatch(real_node, ns) as pods,
        SliceWatch(real_node, ns) as slices,
        TaskExits(real_node) as exits,
    ):
        for manifest in objects:
            real_node.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(manifest))
        # Ready, or its container ended (a configuration the supervisor refuses):
        # then its own words say why.
        assert pods.wait_for(lambda: bool(pods.ready()) or _restarted(pods), 180), real_node.kubectl(
            "describe", "pod", "-n", ns, "quit"
        )
        assert pods.ready(), [s.get("lastState") for s in pods.tracks["quit"].last["status"]["containerStatuses"]]
        log = tmp_path / "quit.log"
        with follow_log(real_node, ns, "quit", log):
            real_node.kubectl("delete", "pod", "-n", ns, "quit", "--wait=false")
            assert pods.wait_for(lambda: pods.tracks["quit"].gone is not None, GRACE + 60), pods.tracks
        story = log.read_text(errors="replace")
        track = pods.tracks["quit"]

        # The kubelet's stop signal was SIGQUIT, and it started the plan.
        assert logged_at(log, "shutting down: received SIGQUIT") is not None, story
        exited = exits.exit_of(track.container_id)
        assert exited is not None and exited[1] == 0, (exited, story)  # not the SIGKILL
        # The drain ran: the app's stop signal only after the pod left the
        # Service's endpoints and propagation_delay had passed.
        left = slices.left.get(track.ip)
        stopped = logged_at(log, APP_SIGTERM)
        assert left is not None and stopped is not None, (slices.left, story)
        assert stopped >= left + PROPAGATION_DELAY - 0.1, (left, stopped, story)
        events = real_node.kubectl("get", "events", "-n", ns, "--field-selector=involvedObject.name=quit", "-o", "json")
        reasons = {e["reason"] for e in json.loads(events)["items"]}
        assert {"DrainStarted", "DrainFinished"} <= reasons, reasons
