"""The real node itself: real kubelet, containerd and scheduler running a
pod, a network with no way out, and nothing left behind."""

from __future__ import annotations

import errno
import ipaddress
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.node._netns import NETNS_DIR, in_netns, ip

from . import _host
from ._cluster import NODE_NAME, PAUSE_IMAGE, RealNode, namespace

pytestmark = pytest.mark.xdist_group("real-node")


def test_the_node_is_a_real_kubelet_on_containerd(real_node: RealNode) -> None:
    node = json.loads(real_node.kubectl("get", "node", NODE_NAME, "-o", "json"))
    info = node["status"]["nodeInfo"]
    assert info["kubeletVersion"] == "v1.35.4"
    assert info["containerRuntimeVersion"] == "containerd://2.3.7"
    assert {"type": "InternalIP", "address": real_node.node_ip} in node["status"]["addresses"]
    assert not node["spec"].get("taints")  # the node-lifecycle controller lifted not-ready


def test_a_pod_is_scheduled_run_and_deleted_by_the_real_components(real_node: RealNode) -> None:
    with namespace(real_node, "real-pod") as ns:
        real_node.kubectl(
            "apply",
            "-n",
            ns,
            "-f",
            "-",
            input=json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {"name": "pause"},
                    "spec": {
                        "terminationGracePeriodSeconds": 2,
                        "containers": [{"name": "pause", "image": PAUSE_IMAGE, "imagePullPolicy": "Never"}],
                    },
                }
            ),
        )
        real_node.kubectl("wait", "-n", ns, "--for=condition=Ready", "pod/pause", "--timeout=120s")
        pod = json.loads(real_node.kubectl("get", "-n", ns, "pod", "pause", "-o", "json"))
        assert pod["spec"]["nodeName"] == NODE_NAME  # bound by kube-scheduler: nobody else binds
        assert ipaddress.ip_address(pod["status"]["podIP"]) in real_node.subnet
        container_id = pod["status"]["containerStatuses"][0]["containerID"]
        assert container_id.startswith("containerd://")
        tasks = real_node.ctr("tasks", "ls")
        assert container_id.removeprefix("containerd://") in tasks

        real_node.kubectl("delete", "-n", ns, "pod", "pause", "--timeout=60s")
        assert container_id.removeprefix("containerd://") not in real_node.ctr("tasks", "ls")


def test_nothing_leaves_the_namespace(real_node: RealNode) -> None:
    assert "default" not in ip("-n", real_node.name, "route", "show", "table", "all")

    def connect_out() -> int:
        with socket.socket() as sock:
            return sock.connect_ex(("192.0.2.1", 80))  # TEST-NET-1: never a real host

    assert in_netns(real_node.name, connect_out) == errno.ENETUNREACH


def test_what_a_killed_run_left_is_swept(tmp_path: Path) -> None:
    """A node whose test process is gone: its namespace with a process in
    it, its cgroups, a mount in its directory and a process naming it are all
    removed, by PID; nothing of a live node is touched."""
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True
    )
    name = f"pid1-node-{int(dead.stdout)}-abc123"
    work = _host.WORK_ROOT / name
    try:
        ip("netns", "add", name)
        _host.make_cgroups(name)
        (work / "mnt").mkdir(parents=True)
        subprocess.run(["mount", "-t", "tmpfs", "tmpfs", str(work / "mnt")], check=True)
        shim = subprocess.Popen(
            ["nsenter", f"--net={NETNS_DIR / name}", sys.executable, "-c", "import time; time.sleep(300)", str(work)],
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        tasks = _host.hierarchies()[0] / name / "cgroup.procs"
        tasks.write_text(str(shim.pid))
        assert len(_host.leftovers(name)) >= 5

        _host.sweep()

        assert _host.leftovers(name) == []
        assert shim.wait(10) == -9
    finally:
        _host.remove(name)
    assert os.path.exists("/proc/self")  # the sweep spared the running test
