"""A whole Kubernetes cluster with one real node, in one network namespace.

etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubelet,
containerd, kube-proxy and the pods all live in a network namespace the test
made, which has a bridge with the node's address and no default route: a
packet for anywhere else has no way out (``connect`` fails with
ENETUNREACH), and no rule masquerades anything.  The test process reaches
kube-apiserver through a relay listening on the host's loopback that
connects from inside the namespace.

    with RealNode(workdir) as node:        # Ready, taint-free, images loaded
        node.kubectl("apply", "-f", ...)

The node's pieces:

* a bridge ``cni0`` holding the node IP (``.1`` of a private /24 nothing on
  the machine uses), which the CNI bridge plugin also puts the pods on;
* containerd (CRI v1) with Debian's runc and CNI plugins, its root and state
  under the node's directory, network namespaces of pods under its state;
* kubelet with the cgroupfs driver under the node's own ``cgroupRoot``
  (kubelet 1.35 refuses cgroup v1 unless ``failCgroupV1: false``), a client
  certificate for ``system:node:<name>`` and the Node authorizer;
* kube-scheduler, and kube-controller-manager with the node-lifecycle
  controller (it lifts the not-ready taint a new Node carries) and the
  disruption controller (PodDisruptionBudgets for evictions);
* kube-proxy in iptables mode, so Service ClusterIPs (the ``kubernetes``
  Service among them: kube-apiserver publishes its endpoint on the node IP)
  work from the node and from pods.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

from tests.cluster._controlplane import CONTROLLERS, DIE_WITH_PARENT, ControlPlane, ControlPlaneError, free_port
from tests.node._netns import NETNS_DIR, in_netns, ip, pick_subnet, sysctl_in
from tests.node._relay import Relay

from . import _host

__all__ = ["BRIDGE", "NODE_NAME", "PAUSE_IMAGE", "RealNode", "namespace"]

NODE_NAME = "pid1-real-node"
BRIDGE = "cni0"
PAUSE_IMAGE = "registry.k8s.io/pause:3.10.2"  # what build.sh tags pause.tar with
SERVICE_RANGE = "10.96.0.0/16"
KUBERNETES_SERVICE_IP = "10.96.0.1"
RUNC = "/usr/sbin/runc"
CNI_PLUGINS = "/usr/lib/cni"


@dataclass
class RealNode(ControlPlane):
    """``start()`` returns once the Node is Ready without taints; ``stop()``
    removes every process, mount, cgroup, namespace and directory it made."""

    name: str = field(default_factory=_host.new_name)
    lock_timeout: float = 600

    def __post_init__(self) -> None:
        self.subnet = pick_subnet([ipaddress.IPv4Network(SERVICE_RANGE)])
        self.node_ip = str(self.subnet.network_address + 1)
        self.dir = _host.WORK_ROOT / self.name
        self.relay = Relay(("127.0.0.1", 0), target_netns=self.name)  # target: once kube-apiserver has a port
        self._lock: contextlib.ExitStack | None = None
        super().__post_init__()

    # -- ControlPlane, moved into the namespace ----------------------------------

    def serving_names(self) -> tuple[str, ...]:
        return (self.node_ip, KUBERNETES_SERVICE_IP)

    def command_prefix(self) -> tuple[str, ...]:
        # nsenter --net only: `ip netns exec` would also remount /sys, and
        # kubelet would not find the cgroup hierarchies under it.
        return (*DIE_WITH_PARENT, "nsenter", f"--net={NETNS_DIR / self.name}", "--")

    def free_port(self) -> int:
        return in_netns(self.name, free_port)

    def expose_api(self) -> int:
        self.relay.target = ("127.0.0.1", self.api_port)
        return self.relay.listen(None, free_port())

    def apiserver_args(self) -> list[str]:
        return [
            "--bind-address=0.0.0.0",  # the namespace's lo and bridge only
            f"--advertise-address={self.node_ip}",
            # The kubelet is reached at the Node's InternalIP, never through a
            # lookup of its name in the machine's DNS.
            "--kubelet-preferred-address-types=InternalIP",
            f"--kubelet-client-certificate={self.apiserver_kubelet_client.cert}",
            f"--kubelet-client-key={self.apiserver_kubelet_client.key}",
        ]

    def controllers(self) -> tuple[str, ...]:
        return (*CONTROLLERS, "node-lifecycle-controller", "disruption-controller", "pod-garbage-collector-controller")

    @property
    def internal_server(self) -> str:
        return f"https://{self.node_ip}:{self.api_port}"

    # -- lifecycle -----------------------------------------------------------

    def start(self, timeout: float = 240) -> Self:
        self._lock = contextlib.ExitStack()
        self._lock.enter_context(_host.host_lock(self.lock_timeout))
        started = time.monotonic()
        try:
            _host.sweep()
            self._make_network()
            _host.make_cgroups(self.name)
            self.apiserver_kubelet_client = self.pki.client("kube-apiserver-kubelet-client", "system:masters")
            super().start(timeout)
            # The node's own parts get the whole timeout again: on a loaded
            # machine the control plane alone can take most of it.
            deadline = time.monotonic() + timeout
            self.timings = {"control plane": time.monotonic() - started}
            self.socket = self._start_containerd(deadline)
            self.import_image(self.bin_dir / "pause.tar")
            self._start_scheduler()
            self._start_kubelet()
            self._start_kube_proxy()
            self._wait_node(deadline)
            self.timings["node"] = time.monotonic() - started - self.timings["control plane"]
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Every process by PID (the components, then whatever still carries
        the node's name: shims, containers), mounts, namespace, cgroups."""
        try:
            super().stop()
            _host.remove(self.name)
            self.relay.close()
        finally:
            if self._lock is not None:
                self._lock.close()
                self._lock = None

    def _make_network(self) -> None:
        ip("netns", "add", self.name)
        ip("-n", self.name, "link", "set", "lo", "up")
        ip("-n", self.name, "link", "add", BRIDGE, "type", "bridge")
        ip("-n", self.name, "addr", "add", f"{self.node_ip}/{self.subnet.prefixlen}", "dev", BRIDGE)
        ip("-n", self.name, "link", "set", BRIDGE, "up")
        # Services: ClusterIPs are DNATed by kube-proxy's OUTPUT rules; the
        # route gives a socket a source address and a way into them.
        ip("-n", self.name, "route", "add", SERVICE_RANGE, "dev", BRIDGE, "src", self.node_ip)
        sysctl_in(self.name, "net.ipv4.ip_forward", "1")
        self.dir.mkdir(mode=0o700)

    # -- containerd ------------------------------------------------------------

    def _start_containerd(self, deadline: float) -> Path:
        base = self.dir / "containerd"
        cni = self.dir / "cni"
        cni.mkdir(parents=True)
        (cni / "10-bridge.conflist").write_text(json.dumps(self._cni_config(), indent=2))
        sock = base / "containerd.sock"
        config = f"""\
version = 3
root = "{base / "root"}"
state = "{base / "state"}"
disabled_plugins = [
  "io.containerd.nri.v1.nri",
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.blockfile",
  "io.containerd.snapshotter.v1.erofs",
  "io.containerd.tracing.processor.v1.otlp",
]
[grpc]
  address = "{sock}"
[ttrpc]
  address = "{sock}.ttrpc"
[debug]
  address = ""
  level = "warn"
[metrics]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = "{base / "opt"}"
[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = "{PAUSE_IMAGE}"
[plugins."io.containerd.cri.v1.runtime"]
  # Without CAP_SYS_RESOURCE nothing can lower an oom_score_adj below 0.
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  enable_cdi = false
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        BinaryName = "{RUNC}"
        SystemdCgroup = false
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = ["{CNI_PLUGINS}"]
    conf_dir = "{cni}"
[plugins."io.containerd.grpc.v1.cri"]
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
"""
        path = self.dir / "containerd.toml"
        path.write_text(config)
        # The runc shim is found on PATH, next to containerd.
        env = {**os.environ, "PATH": f"{self.bin_dir}:{os.environ.get('PATH', '/usr/sbin:/usr/bin:/sbin:/bin')}"}
        process = self.spawn("containerd", [f"--config={path}"], env=env)
        while not sock.is_socket():
            if process.popen.poll() is not None:
                raise ControlPlaneError(f"containerd exited with {process.popen.returncode}:\n{process.tail()}")
            if time.monotonic() > deadline:
                raise ControlPlaneError(f"containerd made no socket by the deadline; its log ends:\n{process.tail()}")
            time.sleep(0.05)
        return sock

    def _cni_config(self) -> dict[str, Any]:
        return {
            "cniVersion": "1.0.0",
            "name": "pid1-node",
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": BRIDGE,
                    "isGateway": True,
                    "ipMasq": False,  # nothing is translated to leave
                    "hairpinMode": True,
                    "ipam": {
                        "type": "host-local",
                        "dataDir": str(self.dir / "ipam"),
                        "ranges": [[{"subnet": str(self.subnet), "gateway": self.node_ip}]],
                        "routes": [{"dst": "0.0.0.0/0"}],
                    },
                },
                {"type": "loopback"},
            ],
        }

    def kubectl_argv(self, *args: str) -> list[str]:
        """A kubectl command line with the admin's credentials, for a
        process that outlives one call (``--watch``, ``logs -f``)."""
        return [str(self.bin_dir / "kubectl"), f"--kubeconfig={self.admin_kubeconfig}", *args]

    def ctr(self, *args: str, check: bool = True) -> str:
        result = subprocess.run(
            [str(self.bin_dir / "ctr"), f"--address={self.socket}", "--namespace=k8s.io", *args],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        if check and result.returncode != 0:
            raise subprocess.CalledProcessError(result.returncode, result.args, result.stdout, result.stderr)
        return result.stdout

    def import_image(self, archive: Path) -> None:
        """An image archive (`podman save`, docker-archive) into the node's store."""
        self.ctr("images", "import", "--platform=linux/amd64", str(archive))

    # -- kube-scheduler, kubelet, kube-proxy ----------------------------------------

    def _component_kubeconfig(self, user: str, *groups: str) -> Path:
        cert = self.pki.client(user, *groups)
        return self.write_kubeconfig(
            self.dir / f"{user.replace(':', '-')}.kubeconfig", cert, server=self.internal_server
        )

    def _start_scheduler(self) -> None:
        kubeconfig = self._component_kubeconfig("system:kube-scheduler")
        self.spawn(
            "kube-scheduler",
            [
                f"--kubeconfig={kubeconfig}",
                f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}",
                "--bind-address=127.0.0.1",
                f"--secure-port={self.free_port()}",
                "--leader-elect=false",
                "--v=1",
            ],
        )

    def _start_kubelet(self) -> None:
        kubeconfig = self._component_kubeconfig(f"system:node:{NODE_NAME}", "system:nodes")
        root = self.dir / "kubelet"
        root.mkdir()
        config = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            # These machines have cgroup v1 only; 1.35 runs on it when told.
            "failCgroupV1": False,
            "cgroupDriver": "cgroupfs",
            "cgroupRoot": f"/{self.name}",
            "containerRuntimeEndpoint": f"unix://{self.socket}",
            "address": self.node_ip,
            "port": self.free_port(),
            "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1",
            "healthzPort": self.free_port(),
            "authentication": {
                "anonymous": {"enabled": False},
                "webhook": {"enabled": True},
                "x509": {"clientCAFile": str(self.pki.ca)},
            },
            "authorization": {"mode": "Webhook"},
            # No DNS at all: an empty resolv.conf for pods rather than the
            # machine's, whose servers are out of reach anyway.
            "resolvConf": "",
            "failSwapOn": False,
            "podLogsDir": str(self.dir / "pod-logs"),
            # The disk is shared with everything else on the machine: no
            # eviction or image GC because of its fill level.
            "evictionHard": {"memory.available": "1Mi", "nodefs.available": "1%", "imagefs.available": "1%"},
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "serializeImagePulls": False,
        }
        path = self.dir / "kubelet.yaml"
        path.write_text(json.dumps(config, indent=2))
        self.spawn(
            "kubelet",
            [
                f"--config={path}",
                f"--kubeconfig={kubeconfig}",
                f"--root-dir={root}",
                f"--cert-dir={self.dir / 'kubelet-pki'}",
                f"--hostname-override={NODE_NAME}",
                f"--node-ip={self.node_ip}",
                "--v=1",
            ],
        )

    def _start_kube_proxy(self) -> None:
        # kubeadm's user for kube-proxy, bound to system:node-proxier by default.
        kubeconfig = self._component_kubeconfig("system:kube-proxy")
        config = {
            "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
            "kind": "KubeProxyConfiguration",
            "mode": "iptables",
            "clientConnection": {"kubeconfig": str(kubeconfig)},
            "hostnameOverride": NODE_NAME,
            "clusterCIDR": str(self.subnet),
            "healthzBindAddress": f"127.0.0.1:{self.free_port()}",
            "metricsBindAddress": f"127.0.0.1:{self.free_port()}",
            "nodePortAddresses": [f"{self.node_ip}/32"],
            # nf_conntrack_max is writable from the host's namespace only:
            # leave the kernel's values.
            "conntrack": {
                "maxPerCore": 0,
                "tcpEstablishedTimeout": "0s",
                "tcpCloseWaitTimeout": "0s",
            },
        }
        path = self.dir / "kube-proxy.yaml"
        path.write_text(json.dumps(config, indent=2))
        self.spawn("kube-proxy", [f"--config={path}", "--v=1"])

    def _wait_node(self, deadline: float) -> None:
        """Until the Node is Ready and the node-lifecycle controller lifted its taints."""
        last: Any = None
        while time.monotonic() < deadline:
            self._check_alive()
            with contextlib.suppress(Exception):
                last = self.get(f"/api/v1/nodes/{NODE_NAME}")
                ready = [c for c in last["status"].get("conditions", []) if c["type"] == "Ready"]
                if ready and ready[0]["status"] == "True" and not last["spec"].get("taints"):
                    return
            time.sleep(0.2)
        kubelet = [p for p in self.processes if p.name == "kubelet"]
        raise ControlPlaneError(
            f"node {NODE_NAME} not Ready and untainted: {json.dumps((last or {}).get('status', {}).get('conditions'))}"
            f" taints {(last or {}).get('spec', {}).get('taints')}; kubelet's log ends:\n"
            + (kubelet[0].tail() if kubelet else "")
        )


@contextlib.contextmanager
def namespace(node: RealNode, name: str) -> Iterator[str]:
    """A namespace for one test, with its `default` ServiceAccount (pods are
    refused until the controller made it); deleted, with its pods, afterwards."""
    node.kubectl("create", "namespace", name)
    try:
        deadline = time.monotonic() + 60
        while not node.kubectl("get", "serviceaccount", "default", "-n", name, "--ignore-not-found", "-o", "name"):
            if time.monotonic() > deadline:
                raise ControlPlaneError(f"no default ServiceAccount in {name} after 60 s")
            time.sleep(0.1)
        yield name
    finally:
        node.kubectl("delete", "namespace", name, "--wait=true", "--timeout=120s", check=False)
