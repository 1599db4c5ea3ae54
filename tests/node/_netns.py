"""Network namespaces for the real node (``tests/realnode``): the
primitives it is made of.

* ``ip`` runs iproute2 and raises ``NetnsError`` with the command on failure;
* ``in_netns`` runs a function in a thread that joined a namespace (a socket
  made there stays there: the relay's listeners, a test's ``connect``);
* ``sysctl_in`` writes a per-namespace sysctl from inside it;
* ``pick_subnet`` finds a private /24 that nothing on the machine has an
  address or a route in;
* every namespace is named ``PREFIX`` + the creating process's PID + a random
  suffix, so that a later run can tell (``_alive``) what a killed run left."""

from __future__ import annotations

import contextlib
import ctypes
import ipaddress
import os
import secrets
import subprocess
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

__all__ = ["NETNS_DIR", "PREFIX", "NetnsError", "in_netns", "ip", "pick_subnet", "sysctl_in"]

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


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
