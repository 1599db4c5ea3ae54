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


def _load(node: NodeNetwork, url: str, out: Path, *, rate: float, count: int) -> subprocess.Popen[bytes]:
    argv = [sys.executable, str(LOADGEN), url, f"--rate={rate:g}", f"--count={count}", "--max-seconds=30"]
    return subprocess.Popen(["nsenter", f"--net=/run/netns/{node.name}", *argv, "--timeout=1", f"--out={out}"])


def _wait_listening(container: Container) -> None:
    end = time.monotonic() + 60
    while "listening on" not in container.output():
        assert container.running and time.monotonic() < end, container.output()
        time.sleep(0.05)


def test_a_pod_serves_the_node_until_sigterm_then_refuses(tmp_path: Path) -> None:
    token = tmp_path / "serviceaccount"
    token.mkdir()
    (token / "token").write_text("not-a-token")
    with NodeNetwork.create("10.96.0.0/16") as node:
        pod = node.add_pod("web-0")
        app = [sys.executable, str(APP), "--port", "8080"]
        container = Container(
            pod.name, "web-0", [SUPERVISOR, "--", *app], {"POD_NAME": "web-0"}, token, tmp_path / "c.log"
        )
        container.start()
        try:
            _wait_listening(container)
            seen = subprocess.run(
                [
                    "nsenter",
                    f"--target={container.pid1}",
                    "--mount",
                    "--uts",
                    "--pid",
                    "sh",
                    "-c",
                    "hostname; cat /var/run/secrets/kubernetes.io/serviceaccount/token; echo; echo $$",
                ],
                capture_output=True,
                text=True,
                check=True,
            ).stdout.split()
            assert seen[:2] == ["web-0", "not-a-token"]
            out = tmp_path / "load.json"
            load = _load(node, f"http://{pod.ip}:8080/", out, rate=100, count=200)
            time.sleep(0.8)
            container.signal(signal.SIGTERM)
            assert container.wait(30), container.output()
            assert load.wait(60) == 0
        finally:
            container.kill()
        assert container.exit_status == 0, container.output()
        requests = json.loads(out.read_text())["requests"]
        outcomes = [r[2] for r in requests]
        assert len(requests) == 200
        assert "ok" in outcomes and "refused" in outcomes, outcomes
        # Served by this pod until the SIGTERM, refused from then on.
        first_refused = outcomes.index("refused")
        assert set(outcomes[first_refused:]) == {"refused"}, outcomes
        assert {r[3] for r in requests if r[2] == "ok"} == {"web-0"}
        names = (node.name, pod.name)
    left = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    assert not [name for name in names if name in left], left
