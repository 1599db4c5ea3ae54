"""Which pods kube-proxy's iptables rules send a Service's traffic to, read
from the rules themselves (``iptables-save -t nat`` in the node namespace).

kube-proxy (iptables mode) writes, per Service port, a ``KUBE-SVC-…`` chain
whose rules jump (with ``-m statistic`` probabilities) to one
``KUBE-SEP-…`` chain per endpoint it currently uses, and each endpoint chain
DNATs to ``IP:PORT``; ``KUBE-SERVICES`` jumps to the Service chain for
packets to the ClusterIP, with the comment ``NAMESPACE/NAME:PORT cluster IP``.
An endpoint chain can outlive its use (kube-proxy deletes stale chains
lazily), so a pod counts as routed only while a Service chain jumps to it.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

__all__ = ["RulesWatch", "Sample", "routed_ips"]

_DNAT = re.compile(r"--to-destination (\d+\.\d+\.\d+\.\d+):\d+")


def routed_ips(nat_table: str, service: str) -> frozenset[str]:
    """Pod IPs the ClusterIP of ``service`` ("namespace/name") is DNATed to."""
    rules = _rules_by_chain(nat_table)
    destinations = _endpoint_destinations(rules)
    routed = set()
    for chain in _service_chains(rules, service):
        for words in rules.get(chain, []):
            target = _option(words, "-j")
            if target in destinations:
                routed.add(destinations[target])
    return frozenset(routed)


def _rules_by_chain(nat_table: str) -> dict[str, list[list[str]]]:
    """The ``-A CHAIN ...`` rules, split into words, per chain."""
    rules: dict[str, list[list[str]]] = {}
    for line in nat_table.splitlines():
        if line.startswith("-A "):
            words = shlex.split(line)
            rules.setdefault(words[1], []).append(words)
    return rules


def _service_chains(rules: dict[str, list[list[str]]], service: str) -> set[str]:
    """The ``KUBE-SVC-...`` chains ``KUBE-SERVICES`` sends the ClusterIP of ``service`` to."""
    chains = set()
    for words in rules.get("KUBE-SERVICES", []):
        comment = _option(words, "--comment") or ""
        target = _option(words, "-j")
        if comment.startswith(f"{service}:") and comment.endswith("cluster IP") and target:
            chains.add(target)
    return chains


def _endpoint_destinations(rules: dict[str, list[list[str]]]) -> dict[str, str]:
    """Each ``KUBE-SEP-...`` chain's DNAT address."""
    destinations: dict[str, str] = {}
    for chain, chain_rules in rules.items():
        if not chain.startswith("KUBE-SEP-"):
            continue
        for words in chain_rules:
            match = _DNAT.search(" ".join(words))
            if match:
                destinations[chain] = match.group(1)
    return destinations


def _option(words: Sequence[str], name: str) -> str | None:
    for i, word in enumerate(words[:-1]):
        if word == name:
            return words[i + 1]
    return None


@dataclass(frozen=True)
class Sample:
    at: float  # time.monotonic() when iptables-save returned
    routed: frozenset[str]


@dataclass
class RulesWatch:
    """Samples the rules every ``interval`` in a thread, while in use."""

    netns: str
    service: str
    interval: float = 0.05
    samples: list[Sample] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def read(self) -> frozenset[str]:
        command = ["nsenter", f"--net=/run/netns/{self.netns}", "iptables-save", "-t", "nat"]
        result = subprocess.run(command, capture_output=True, text=True, timeout=10, check=False)
        if result.returncode != 0:
            raise RuntimeError(f"`{' '.join(command)}` failed: {result.stderr.strip()}")
        return routed_ips(result.stdout, self.service)

    def __enter__(self) -> RulesWatch:
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"rules-{self.service}")
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(15)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                routed = self.read()
            except (RuntimeError, subprocess.TimeoutExpired) as exc:
                self.errors.append(str(exc))
            else:
                self.samples.append(Sample(time.monotonic(), routed))
            self._stop.wait(self.interval)

    def unrouted_at(self, address: str, after: float) -> float | None:
        """The first sample after ``after`` from which on ``address`` was no
        longer routed (and stayed so), or None."""
        found: float | None = None
        for sample in self.samples:
            if sample.at < after:
                continue
            if address in sample.routed:
                found = None
            elif found is None:
                found = sample.at
        return found

    def wait_routed(self, addresses: set[str], timeout: float) -> bool:
        """Block until the rules route to exactly ``addresses``."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.samples and self.samples[-1].routed == addresses:
                return True
            time.sleep(self.interval)
        return False
