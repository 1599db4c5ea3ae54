"""kube-proxy in iptables mode, in the node's network namespace, against the
real API server (through the relay at 127.0.0.1 there).

It authenticates as kubeadm sets it up: the ServiceAccount
``kube-system/kube-proxy`` bound to the built-in ClusterRole
``system:node-proxier``, with a token from the TokenRequest API.  The
conntrack settings are 0 ("leave the kernel's values"): ``nf_conntrack_max``
can only be written from the host's namespace, and kube-proxy would refuse to
start trying (kind configures its kube-proxy the same way).  Every other
setting is kube-proxy's default, ``minSyncPeriod`` (1 s) included: that is
the propagation delay under test.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import subprocess
import time
from pathlib import Path
from typing import Any

import yaml

from ._netns import in_netns
from ._site import NodeSite

__all__ = ["KubeProxy", "KubeProxyError"]

HEALTHZ_PORT = 10256
METRICS_PORT = 10249


class KubeProxyError(Exception):
    pass


class KubeProxy:
    def __init__(self, binary: Path, site: NodeSite, api_port: int) -> None:
        """``api_port``: the relay's port in the node's namespace."""
        self.binary = binary
        self.api = site.api
        self.network = site.network
        self.node_name = site.name
        self.api_port = api_port
        self.ca_file = site.ca_file
        self.workdir = site.workdir
        self.log = site.workdir / "kube-proxy.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 120) -> None:
        token = self._credentials()
        (self.workdir / "kube-proxy.token").write_text(token)
        kubeconfig = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "local",
                    "cluster": {
                        "server": f"https://127.0.0.1:{self.api_port}",
                        "certificate-authority": str(self.ca_file),
                    },
                }
            ],
            "users": [{"name": "kube-proxy", "user": {"tokenFile": str(self.workdir / "kube-proxy.token")}}],
            "contexts": [{"name": "local", "context": {"cluster": "local", "user": "kube-proxy"}}],
            "current-context": "local",
        }
        (self.workdir / "kube-proxy.kubeconfig").write_text(yaml.safe_dump(kubeconfig))
        config = {
            "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
            "kind": "KubeProxyConfiguration",
            "mode": "iptables",
            "clientConnection": {"kubeconfig": str(self.workdir / "kube-proxy.kubeconfig")},
            "hostnameOverride": self.node_name,
            "clusterCIDR": str(self.network.subnet),
            "healthzBindAddress": f"127.0.0.1:{HEALTHZ_PORT}",
            "metricsBindAddress": f"127.0.0.1:{METRICS_PORT}",
            "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
            # NodePorts on the node's own address only (what kube-proxy recommends).
            "nodePortAddresses": ["primary"],
        }
        (self.workdir / "kube-proxy.yaml").write_text(yaml.safe_dump(config))
        argv = [
            "nsenter",
            f"--net=/run/netns/{self.network.name}",
            str(self.binary),
            f"--config={self.workdir / 'kube-proxy.yaml'}",
            "--v=2",
        ]
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        end = time.monotonic() + timeout
        while not self.healthy():
            if self.proc.poll() is not None:
                raise KubeProxyError(f"kube-proxy exited with {self.proc.returncode}:\n{self.output()}")
            if time.monotonic() > end:
                raise KubeProxyError(f"kube-proxy not healthy after {timeout:g}s:\n{self.output()}")
            time.sleep(0.2)

    def _credentials(self) -> str:
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        core: Any = client.CoreV1Api(self.api)
        rbac: Any = client.RbacAuthorizationV1Api(self.api)
        with contextlib.suppress(ApiException):  # 409: it exists already
            core.create_namespaced_service_account("kube-system", {"metadata": {"name": "kube-proxy"}})
        with contextlib.suppress(ApiException):
            rbac.create_cluster_role_binding(
                {
                    "metadata": {"name": "pid1-tests:kube-proxy"},
                    "roleRef": {
                        "apiGroup": "rbac.authorization.k8s.io",
                        "kind": "ClusterRole",
                        "name": "system:node-proxier",
                    },
                    "subjects": [{"kind": "ServiceAccount", "name": "kube-proxy", "namespace": "kube-system"}],
                }
            )
        answer = core.create_namespaced_service_account_token(
            "kube-proxy",
            "kube-system",
            {"spec": {"audiences": [], "expirationSeconds": 86400}},
            _preload_content=False,
        )
        return str(json.loads(answer.data)["status"]["token"])

    def _get(self, port: int, path: str) -> tuple[int, str]:
        def get() -> tuple[int, str]:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            try:
                connection.request("GET", path)
                answer = connection.getresponse()
                return answer.status, answer.read().decode(errors="replace")
            finally:
                connection.close()

        return in_netns(self.network.name, get)

    def healthy(self) -> bool:
        try:
            return self._get(HEALTHZ_PORT, "/healthz")[0] == 200
        except OSError:
            return False

    def metrics(self) -> str:
        return self._get(METRICS_PORT, "/metrics")[1]

    def output(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        # The rules live in the node's namespace and go with it; nothing of
        # kube-proxy's is left in the host's tables.
