"""A node without a kubelet: its network namespace, kube-proxy in it, the
stand-in kubelet running pods in namespaces of their own, and a load
generator that sends traffic from the node to a Service's ClusterIP.

    with Node.start(api, api_port=..., ca_file=..., service_range="10.96.0.0/16",
                    kube_proxy=bin_dir / "kube-proxy", workdir=tmp) as node:
        node.kubelet.serve("my-namespace")
        ...

``close`` (also on failure) stops the load generators, the pods, kube-proxy
and the relay, and deletes every namespace, in that order.
"""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ._kube_proxy import KubeProxy
from ._kubelet import Kubelet
from ._netns import NodeNetwork
from ._relay import Relay
from ._rules import RulesWatch
from ._site import NodeSite

__all__ = ["SERVICE_RANGE", "Load", "Node"]

HERE = Path(__file__).resolve().parent
# The IPv4 half of tests/cluster's --service-cluster-ip-range: routed to the
# node's loopback so that ClusterIPs meet kube-proxy's rules.
SERVICE_RANGE = "10.96.0.0/16"
LOADGEN = HERE / "loadgen.py"


@dataclass
class Load:
    """One run of ``loadgen.py`` in the node's namespace."""

    proc: subprocess.Popen[bytes]
    out: Path
    log: Path

    def started(self, timeout: float = 30) -> None:
        end = time.monotonic() + timeout
        while not self.out.with_suffix(".started").exists():
            if self.proc.poll() is not None or time.monotonic() > end:
                raise RuntimeError(f"the load generator did not start:\n{self.log.read_text(errors='replace')}")
            time.sleep(0.02)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)

    def result(self, timeout: float) -> dict[str, Any]:
        """Wait for the generator to finish (stopped or done); its report."""
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise RuntimeError(f"the load generator did not finish in {timeout:g}s") from None
        if self.proc.returncode != 0 or not self.out.exists():
            raise RuntimeError(
                f"the load generator failed ({self.proc.returncode}):\n{self.log.read_text(errors='replace')}"
            )
        data: dict[str, Any] = json.loads(self.out.read_text())
        return data

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@dataclass
class Node:
    name: str
    network: NodeNetwork
    relay: Relay
    kube_proxy: KubeProxy
    kubelet: Kubelet
    workdir: Path
    loads: list[Load] = field(default_factory=list)

    @classmethod
    @contextlib.contextmanager
    def start(
        cls,
        api: Any,
        *,
        api_port: int,
        ca_file: Path,
        service_range: str,
        kube_proxy: Path,
        workdir: Path,
    ) -> Iterator[Node]:
        workdir.mkdir(parents=True, exist_ok=True)
        with contextlib.ExitStack() as stack:
            network = stack.enter_context(NodeNetwork.create(service_range))
            name = network.name  # the Node's name too
            relay = Relay(("127.0.0.1", api_port))
            stack.callback(relay.close)
            port = relay.listen(network.name)
            site = NodeSite(api, name, network, ca_file, workdir)
            kubelet = Kubelet(site, relay)
            stack.enter_context(kubelet)
            proxy = KubeProxy(kube_proxy, site, port)
            stack.callback(proxy.close)
            proxy.start()
            node = cls(name, network, relay, proxy, kubelet, workdir)
            stack.callback(node._stop_loads)
            # Closed in reverse: loads, kube-proxy, pods (kubelet), relay, namespaces.
            yield node

    @classmethod
    @contextlib.contextmanager
    def on(cls, plane: Any, workdir: Path) -> Iterator[tuple[Node, Any]]:
        """A node on ``plane`` (a started ``tests.cluster.ControlPlane``),
        with kube-proxy from the same build; yields it and an admin client."""
        from kubernetes import config

        api = config.new_client_from_config(config_file=str(plane.admin_kubeconfig))  # type: ignore[no-untyped-call]
        with cls.start(
            api,
            api_port=plane.port,
            ca_file=plane.pki.ca,
            service_range=SERVICE_RANGE,
            kube_proxy=plane.bin_dir / "kube-proxy",
            workdir=workdir,
        ) as node:
            yield node, api

    def rules(self, service: str, interval: float = 0.05) -> RulesWatch:
        """A watch of kube-proxy's rules for ``service`` ("namespace/name")."""
        return RulesWatch(self.network.name, service, interval)

    def load(self, url: str, *, rate: float, count: int, max_seconds: float, timeout: float = 2.0) -> Load:
        """Start the load generator in the node's namespace (the host's
        interpreter and trio; the script imports nothing else)."""
        index = len(self.loads)
        out = self.workdir / f"load-{index}.json"
        log = self.workdir / f"load-{index}.log"
        argv = [
            "nsenter",
            f"--net=/run/netns/{self.network.name}",
            sys.executable,
            str(LOADGEN),
            url,
            f"--rate={rate:g}",
            f"--count={count}",
            f"--max-seconds={max_seconds:g}",
            f"--timeout={timeout:g}",
            f"--out={out}",
        ]
        with log.open("wb") as stream:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=stream, stderr=subprocess.STDOUT)
        load = Load(proc, out, log)
        self.loads.append(load)
        return load

    def _stop_loads(self) -> None:
        for load in self.loads:
            load.kill()
