"""The distroless case, under the real kubelet: an image with no shell and no
``sleep`` (only the interpreter the supervisor and the app need), three pods
of it side by side behind one Service (with a fourth that stays), deleted
together, each waiting for the Service's traffic to stop in its own way:

* ``preStop: exec: [sleep, "15"]``, the classic copied from a Debian-based
  image: the real kubelet cannot run it (``FailedPreStopHook`` among the
  pod's Events) and sends SIGTERM at once, the wait never happens;
* the kubelet's own ``preStop: sleep`` action (GA in 1.34): SIGTERM only
  after a fixed guess, however long the Service actually took;
* the supervisor's endpoint drain: SIGTERM at once, the app's stop signal
  only once the pod is out of the Service's EndpointSlice and
  ``propagation_delay`` has passed, as long as that takes.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from ._cluster import RealNode, namespace
from ._images import load_distroless_image
from ._manifests import config_map, pod_spec, service, supervisor_access, supervisor_yaml
from ._timeline import PodWatch, SliceWatch, TaskExits, follow_log, logged_at

pytestmark = [pytest.mark.xdist_group("real-node"), pytest.mark.slow]

GRACE = 30
SLEEP = 8  # the preStop sleep action's fixed guess
PROPAGATION_DELAY = 2.0
SUPERVISOR_SIGTERM = "shutting down: received SIGTERM"
APP_SIGTERM = "SIGTERM: not listening any more"  # tests/node/app.py


def _objects(image: str) -> list[dict[str, Any]]:
    """The Service over the pods, the drain's RBAC, two configurations (with
    and without the endpoint drain), the three pods, and a fourth that stays:
    the Service keeps a ready endpoint, as it has in a rollout (with none
    left, kube-proxy would go on sending traffic to the terminating pods,
    and the drain would rightly keep serving)."""
    labels = {"app": "distroless"}
    pods: dict[str, tuple[str, dict[str, Any] | None]] = {
        "exec-sleep": ("plain", {"exec": {"command": ["sleep", "15"]}}),
        "sleep-action": ("plain", {"sleep": {"seconds": SLEEP}}),
        "endpoint-drain": ("drain", None),
        "stays": ("plain", None),
    }
    return [
        *supervisor_access(),
        config_map("plain", supervisor_yaml(GRACE)),
        config_map("drain", supervisor_yaml(GRACE, drain_service="distroless", propagation_delay=PROPAGATION_DELAY)),
        service("distroless", labels),
        *(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name, "labels": labels},
                "spec": pod_spec(image, config, GRACE, pre_stop),
            }
            for name, (config, pre_stop) in pods.items()
        ),
    ]


PODS = ("exec-sleep", "sleep-action", "endpoint-drain")


def _known(values: dict[str, float | None], story: str) -> dict[str, float]:
    """``values`` without a None, which fails the test."""
    missing = [key for key, value in values.items() if value is None]
    assert not missing, f"nothing measured for {missing}:\n{story}"
    return {key: value for key, value in values.items() if value is not None}


def _events(node: RealNode, ns: str, pod: str) -> list[dict[str, Any]]:
    listing = node.kubectl("get", "events", "-n", ns, f"--field-selector=involvedObject.name={pod}", "-o", "json")
    items: list[dict[str, Any]] = json.loads(listing)["items"]
    return items


def test_three_ways_to_wait_in_an_image_without_sleep(real_node: RealNode, tmp_path: Path) -> None:
    image = load_distroless_image(real_node)
    with (
        namespace(real_node, "distroless") as ns,
        PodWatch(real_node, ns) as pods,
        SliceWatch(real_node, ns) as slices,
        TaskExits(real_node) as exits,
    ):
        for manifest in _objects(image):
            real_node.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(manifest))
        assert pods.wait_for(lambda: {t.name for t in pods.ready()} >= {*PODS, "stays"}, 180), pods.tracks

        # What the image lacks, as `kubectl exec` shows it.
        for missing in (["sh", "-c", "true"], ["sleep", "1"]):
            run = subprocess.run(
                real_node.kubectl_argv("exec", "-n", ns, "endpoint-drain", "--", *missing),
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
            assert run.returncode != 0 and "not found" in run.stderr, (missing, run.stderr)

        logs = {pod: tmp_path / f"{pod}.log" for pod in PODS}
        with contextlib.ExitStack() as following:
            for pod, path in logs.items():
                following.enter_context(follow_log(real_node, ns, pod, path))
            real_node.kubectl("delete", "pod", "-n", ns, *PODS, "--wait=false")
            assert pods.wait_for(lambda: all(pods.tracks[p].gone for p in PODS), GRACE + 90), pods.tracks
        story = "\n".join(f"--- {pod}\n{path.read_text(errors='replace')}" for pod, path in logs.items())

        deleted = _known({pod: pods.tracks[pod].deleted for pod in PODS}, story)
        supervisor = _known({pod: logged_at(logs[pod], SUPERVISOR_SIGTERM) for pod in PODS}, story)
        app = _known({pod: logged_at(logs[pod], APP_SIGTERM) for pod in PODS}, story)
        since = {pod: supervisor[pod] - deleted[pod] for pod in PODS}  # the kubelet's SIGTERM
        for pod in PODS:
            # Each ended on its own before the grace period: the supervisor's
            # exit status, not the SIGKILL's.
            exited = exits.exit_of(pods.tracks[pod].container_id)
            assert exited is not None and exited[1] == 0, (pod, exited, story)

        # The exec hook cannot run: `kubectl describe pod` shows the
        # kubelet's "Warning FailedPreStopHook ... PreStopHook failed" (the
        # reason, "sleep" not found, is only in the kubelet's own log), and
        # SIGTERM comes at once: the 15 s wait a user counted on never happens.
        failed = [e for e in _events(real_node, ns, "exec-sleep") if e["reason"] == "FailedPreStopHook"]
        assert [(e["type"], e["message"]) for e in failed] == [("Warning", "PreStopHook failed")], failed
        assert since["exec-sleep"] < SLEEP, (since, story)
        # The sleep action waits its fixed guess, and only then SIGTERM.
        assert not [e for e in _events(real_node, ns, "sleep-action") if e["reason"] == "FailedPreStopHook"]
        assert since["sleep-action"] >= SLEEP - 0.5, (since, story)
        # The drain: SIGTERM at once, the app's stop signal only once the pod
        # had left the EndpointSlice and propagation_delay had passed.
        assert since["endpoint-drain"] < SLEEP, (since, story)
        drain_ip = pods.tracks["endpoint-drain"].ip
        left = slices.left.get(drain_ip)
        assert left is not None, (slices.left, story)
        assert app["endpoint-drain"] >= left + PROPAGATION_DELAY - 0.1, (left, app, story)
        reasons = {e["reason"] for e in _events(real_node, ns, "endpoint-drain")}
        assert {"DrainStarted", "DrainFinished"} <= reasons, reasons
