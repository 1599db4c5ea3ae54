"""The node's parts that need no control plane: pod network namespaces
routed from the node's, the container as PID 1 with its token mounted, the
app's SIGTERM behaviour, the load generator's accounting, and the clean-up."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.node import Container, NodeNetwork
from tests.node._node import LOADGEN
from tests.node._rollout import APP, SUPERVISOR

pytestmark = pytest.mark.xdist_group("node")


def _load(node: NodeNetwork, url: str, out: Path, *, rate: float, count: int) -> list[list[object]]:
    argv = [sys.executable, str(LOADGEN), url, f"--rate={rate:g}", f"--count={count}", "--max-seconds=30"]
    command = ["nsenter", f"--net=/run/netns/{node.name}", *argv, "--timeout=5", f"--out={out}"]
    subprocess.run(command, check=True, timeout=120)
    requests: list[list[object]] = json.loads(out.read_text())["requests"]
    return requests


def _in_pod(container: Container, script: str) -> list[str]:
    command = ["nsenter", f"--target={container.pid1}", "--mount", "--uts", "--pid", "--net", "sh", "-c", script]
    return subprocess.run(command, capture_output=True, text=True, check=True, timeout=60).stdout.split()


def _wait_for(container: Container, text: str) -> None:
    end = time.monotonic() + 60
    while text not in container.output():
        assert container.running and time.monotonic() < end, container.output()
        time.sleep(0.05)


def test_a_pod_serves_until_sigterm_then_refuses_and_finishes_what_it_accepted(tmp_path: Path) -> None:
    token = tmp_path / "serviceaccount"
    token.mkdir()
    (token / "token").write_text("not-a-token")
    with NodeNetwork.create("10.96.0.0/16") as node:
        pod = node.add_pod("web-0")
        app = [SUPERVISOR, "--", sys.executable, str(APP), "--port", "8080", "--delay", "8"]
        container = Container(pod.name, "web-0", app, {"POD_NAME": "web-0"}, token, tmp_path / "c.log")
        container.start()
        try:
            _wait_for(container, "listening on")
            hostname, secret = _in_pod(container, "hostname; cat /var/run/secrets/kubernetes.io/serviceaccount/token")
            assert (hostname, secret) == ("web-0", "not-a-token")
            before = _load(node, f"http://{pod.ip}:8080/healthz", tmp_path / "before.json", rate=20, count=10)
            # One slow request in flight (8 s), then SIGTERM: the app stops
            # listening at once and still answers the request it accepted.
            slow = subprocess.Popen(
                ["nsenter", f"--net=/run/netns/{node.name}", "curl", "-sS", "-m", "30", f"http://{pod.ip}:8080/"],
                stdout=subprocess.PIPE,
                text=True,
            )
            _wait_until_connected(node, pod.ip)
            container.signal(signal.SIGTERM)
            _wait_for(container, "not listening any more")
            during = _load(node, f"http://{pod.ip}:8080/healthz", tmp_path / "during.json", rate=20, count=5)
            assert container.running, "the app must still be finishing its slow request"
            answer, _ = slow.communicate(timeout=60)
            assert container.wait(30), container.output()
        finally:
            container.kill()
        assert container.exit_status == 0, container.output()
        assert [(r[2], r[3]) for r in before] == [("ok", "web-0")] * 10
        assert [r[2] for r in during] == ["refused"] * 5
        assert answer.strip() == "web-0"
        names = (node.name, pod.name)
    left = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    assert not [name for name in names if name in left], left


def _wait_until_connected(node: NodeNetwork, address: str) -> None:
    """Until the node has an established connection to the pod's :8080."""
    end = time.monotonic() + 60
    while time.monotonic() < end:
        command = ["nsenter", f"--net=/run/netns/{node.name}", "ss", "-Htn", "state", "established", "dst", address]
        if subprocess.run(command, capture_output=True, text=True, check=True).stdout.strip():
            return
        time.sleep(0.05)
    raise AssertionError(f"no connection to {address} in 60 s")


def test_namespaces_a_killed_run_left_are_swept_with_their_processes() -> None:
    gone = subprocess.Popen(["true"])
    gone.wait()
    name = f"pid1-node-{gone.pid}-abc123"
    subprocess.run(["ip", "netns", "add", name], check=True)
    orphan = subprocess.Popen(["ip", "netns", "exec", name, "sleep", "600"])
    try:
        end = time.monotonic() + 60
        pids = ["ip", "netns", "pids", name]
        while str(orphan.pid) not in subprocess.run(pids, capture_output=True, text=True, check=False).stdout:
            assert time.monotonic() < end, "the orphan never entered its namespace"
            time.sleep(0.05)
        with NodeNetwork.create("10.96.0.0/16") as node:
            assert not Path(f"/run/netns/{name}").exists()
            assert orphan.wait(10) == -signal.SIGKILL
            assert Path(f"/run/netns/{node.name}").exists()  # a live run's own namespace stays
    finally:
        if orphan.poll() is None:
            orphan.kill()
            orphan.wait()
        subprocess.run(["ip", "netns", "delete", name], capture_output=True, check=False)
