"""Network namespaces for a node without a kubelet: one "node" namespace and
one per pod, joined by point-to-point veth pairs.

Layout (every address from one private /24 that nothing on the machine uses)::

    host netns            untouched: no interface, address, route or rule added
    node netns            lo; for each pod a veth ``p<N>`` holding the gateway
                          address .1/32, and a /32 route to the pod through it;
                          the Service range routed to ``lo`` so that a
                          connection to a ClusterIP leaves the socket layer and
                          meets kube-proxy's rules in OUTPUT
    pod netns (one each)  lo; ``eth0`` with the pod's /32 and a default route
                          to the gateway

Routed /32 links instead of a bridge: traffic between the node and its pods
never crosses a bridge, so br_netfilter and ``bridge-nf-call-iptables`` play
no part (Calico lays pods out the same way).  Every namespace has a random
name (with the creating process's PID, so a later run can remove what a
killed one left), so two runs on one machine never meet; the interfaces live
inside the namespaces, so their names cannot collide with the host's.
"""

from __future__ import annotations

import contextlib
import ctypes
import ipaddress
import os
import re
import secrets
import signal
import subprocess
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

__all__ = ["NetnsError", "NodeNetwork", "PodNetwork", "in_netns", "pick_subnet", "sweep_stale"]

NETNS_DIR = Path("/run/netns")
PREFIX = "pid1-node-"  # then the creating process's PID and a random suffix
CLONE_NEWNET = 0x40000000
T = TypeVar("T")


class NetnsError(Exception):
    """A namespace or link could not be made; the message has the command."""


def ip(*args: str) -> str:
    command = ["ip", *args]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise NetnsError(f"`{' '.join(command)}` failed: {result.stderr.strip()}")
    return result.stdout


def sysctl_in(netns: str, key: str, value: str) -> None:
    """Write a per-namespace sysctl from inside ``netns`` (the files under
    /proc/sys/net belong to the reader's network namespace)."""
    path = "/proc/sys/" + key.replace(".", "/")
    in_netns(netns, lambda: Path(path).write_text(value))


def in_netns(netns: str, work: Callable[[], T]) -> T:
    """Run ``work`` in a short-lived thread that has joined ``netns``: sockets
    it creates stay in that namespace, the rest of the process never moves."""
    result: list[T] = []
    failure: list[BaseException] = []

    def run() -> None:
        try:
            _setns(NETNS_DIR / netns)
            result.append(work())
        except BaseException as exc:  # handed to the caller below
            failure.append(exc)

    thread = threading.Thread(target=run, name=f"netns-{netns}")
    thread.start()
    thread.join()
    if failure:
        raise failure[0]
    return result[0]


def _setns(path: Path) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            errno = ctypes.get_errno()
            raise OSError(errno, f"setns({path}): {os.strerror(errno)}")
    finally:
        os.close(fd)


def host_networks() -> list[ipaddress.IPv4Network]:
    """Every IPv4 network the host has an address or a route in."""
    found: list[ipaddress.IPv4Network] = []
    for line in ip("-4", "-o", "addr", "show").splitlines() + ip("-4", "route", "show", "table", "all").splitlines():
        for word in line.split():
            with contextlib.suppress(ValueError):
                if "/" in word or word[0].isdigit():
                    found.append(ipaddress.IPv4Network(word, strict=False))
    return found


def pick_subnet(avoid: Sequence[ipaddress.IPv4Network] = ()) -> ipaddress.IPv4Network:
    """A random /24 of 10.200.0.0/13 that overlaps nothing the host routes,
    nor ``avoid`` (the cluster's Service range, say)."""
    taken = [*host_networks(), *avoid]
    for _ in range(64):
        candidate = ipaddress.IPv4Network(f"10.{200 + secrets.randbelow(8)}.{secrets.randbelow(256)}.0/24")
        if not any(candidate.overlaps(net) for net in taken if net.prefixlen > 0):
            return candidate
    raise NetnsError("no free /24 in 10.200.0.0/13 on this machine")


def sweep_stale() -> None:
    """Remove what a run killed before its clean-up (SIGKILL, a lost
    machine) left: the namespaces are named after the creating process, and
    those whose creator is gone are emptied (their processes killed, by PID)
    and deleted.  A live run's namespaces are never touched."""
    if not NETNS_DIR.is_dir():
        return
    for entry in sorted(NETNS_DIR.iterdir()):
        match = re.match(rf"{PREFIX}(\d+)-[0-9a-f]{{6}}", entry.name)
        if match is None or _alive(int(match.group(1))):
            continue
        with contextlib.suppress(NetnsError):
            for pid in ip("netns", "pids", entry.name).split():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(pid), signal.SIGKILL)
            ip("netns", "delete", entry.name)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@dataclass
class PodNetwork:
    name: str  # the namespace's name under /run/netns
    ip: str
    link: str  # the node-side veth

    @property
    def path(self) -> Path:
        return NETNS_DIR / self.name


@dataclass
class NodeNetwork:
    """The node namespace and the pods' namespaces; ``close`` removes all."""

    name: str
    subnet: ipaddress.IPv4Network
    service_range: ipaddress.IPv4Network
    pods: dict[str, PodNetwork] = field(default_factory=dict)
    _free: list[str] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _links: int = 0

    @property
    def gateway(self) -> str:
        return str(self.subnet.network_address + 1)

    @classmethod
    @contextlib.contextmanager
    def create(cls, service_range: str) -> Iterator[NodeNetwork]:
        services = ipaddress.IPv4Network(service_range)
        sweep_stale()
        node = cls(f"{PREFIX}{os.getpid()}-{secrets.token_hex(3)}", pick_subnet([services]), services)
        node._free = [str(host) for host in list(node.subnet.hosts())[1:]]
        try:
            ip("netns", "add", node.name)
            node._setup()
            yield node
        finally:
            node.close()

    def _setup(self) -> None:
        ip("-n", self.name, "link", "set", "lo", "up")
        # The gateway address on lo: the node's own address, which kube-proxy
        # reads from the Node object and which source-NATed traffic leaves with.
        ip("-n", self.name, "addr", "add", f"{self.gateway}/32", "dev", "lo")
        ip("-n", self.name, "route", "add", str(self.service_range), "dev", "lo", "src", self.gateway)
        sysctl_in(self.name, "net.ipv4.ip_forward", "1")

    def add_pod(self, label: str) -> PodNetwork:
        with self._lock:
            if not self._free:
                raise NetnsError(f"{self.subnet} has no free address left")
            address = self._free.pop(0)
            self._links += 1
            link = f"p{self._links}"
        pod = PodNetwork(f"{self.name}-{label}"[:60], address, link)
        ip("netns", "add", pod.name)
        self.pods[pod.name] = pod
        try:
            ip("-n", self.name, "link", "add", link, "type", "veth", "peer", "name", "eth0", "netns", pod.name)
            ip("-n", self.name, "addr", "add", f"{self.gateway}/32", "dev", link)
            ip("-n", self.name, "link", "set", link, "up")
            ip("-n", self.name, "route", "add", f"{address}/32", "dev", link)
            ip("-n", pod.name, "link", "set", "lo", "up")
            ip("-n", pod.name, "addr", "add", f"{address}/32", "dev", "eth0")
            ip("-n", pod.name, "link", "set", "eth0", "up")
            ip("-n", pod.name, "route", "add", self.gateway, "dev", "eth0", "scope", "link")
            ip("-n", pod.name, "route", "add", "default", "via", self.gateway, "dev", "eth0")
        except NetnsError:
            self.remove_pod(pod.name)
            raise
        return pod

    def remove_pod(self, name: str) -> None:
        pod = self.pods.pop(name, None)
        if pod is None:
            return
        # Deleting the namespace deletes eth0, and with it the node's end.
        with contextlib.suppress(NetnsError):
            ip("netns", "delete", pod.name)
        with contextlib.suppress(NetnsError):
            ip("-n", self.name, "link", "delete", pod.link)
        with self._lock:
            self._free.append(pod.ip)

    def close(self) -> None:
        for name in list(self.pods):
            self.remove_pod(name)
        if (NETNS_DIR / self.name).exists():
            ip("netns", "delete", self.name)

    def exec_argv(self, *argv: str) -> list[str]:
        """``argv`` run inside the node namespace."""
        return ["ip", "netns", "exec", self.name, *argv]
