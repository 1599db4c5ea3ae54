"""A rolling update under load on the real node, measured: a Deployment of
the project's image (the supervisor as PID 1, ``tests/node/app.py`` as its
main process) behind a ClusterIP Service, a steady load through the
ClusterIP from the node's network namespace (the real kube-proxy's rules),
and ``kubectl rollout restart``, which replaces every pod with the
Deployment controller's ``maxSurge: 1, maxUnavailable: 0``.

Three ways to stop the same app (which stops listening at SIGTERM):

* ``no-prestop``: nothing before the SIGTERM (what many deployments do);
* ``prestop-sleep``: ``preStop: exec: [sleep, "15"]`` (the classic);
* ``endpoint-drain``: the kubernetes plugin's ``endpoint_drain``, configured
  as ``examples/kubernetes`` does (no preStop).

For each old pod: its deletion (the watch event), PID 1's exit (containerd's
task exit), its removal from the API, and the moment kube-proxy's rules
stopped sending the Service's traffic to it (``RulesWatch``).  The waste of
a pod's grace period is its exit less that moment: the time it stayed up
after traffic had stopped reaching it (negative: it was gone while traffic
still came).
"""

from __future__ import annotations

import collections
import contextlib
import json
import statistics
import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.node._load import Load
from tests.node._rules import RulesWatch

from ._cluster import RealNode, namespace
from ._manifests import config_map, pod_spec, service, supervisor_access, supervisor_yaml
from ._timeline import PodTrack, PodWatch, TaskExits, follow_log

__all__ = ["CONFIGS", "Config", "PodOutcome", "Rollout", "RolloutResult", "run_rollout"]

FAILED = ("refused", "reset", "timeout", "http_5xx", "http_other", "error")
SIGKILLED = 128 + 9


@dataclass(frozen=True)
class Config:
    name: str
    title: str
    prestop_sleep: int | None = None
    drain: bool = False


CONFIGS = {
    "no-prestop": Config("no-prestop", "no preStop, the app exits at SIGTERM"),
    "prestop-sleep": Config("prestop-sleep", "preStop: sleep 15", prestop_sleep=15),
    "endpoint-drain": Config("endpoint-drain", "the supervisor's endpoint_drain", drain=True),
}


@dataclass
class PodOutcome:
    name: str
    ip: str
    to_exit: float | None  # deletion → PID 1 exited
    to_gone: float | None  # deletion → the Pod removed from the API
    to_unrouted: float | None  # deletion → kube-proxy's rules no longer name it
    exit_status: int | None
    output: str = ""  # the container's last lines, when it did not exit 0

    @property
    def killed(self) -> bool:
        return self.exit_status == SIGKILLED

    @property
    def waste(self) -> float | None:
        if self.to_exit is None or self.to_unrouted is None:
            return None
        return self.to_exit - self.to_unrouted


@dataclass
class RolloutResult:
    config: Config
    sent: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)
    pods: list[PodOutcome] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    duration: float = 0.0
    failures: list[list[Any]] = field(default_factory=list)
    # Answered, but only after a second or more: a SYN to a pod whose network
    # was already gone, dropped, and retransmitted after 1 s, when kube-proxy
    # had picked another pod.  Not failed, but what a user sees as a stall.
    slow: int = 0

    @property
    def failed(self) -> int:
        return sum(self.outcomes.get(kind, 0) for kind in FAILED)

    def summary(self) -> str:
        kinds = ", ".join(f"{kind} {n}" for kind, n in sorted(self.outcomes.items()) if kind != "ok") or "none"
        lines = [
            f"{self.config.name}: {self.sent} requests, {self.failed} failed ({kinds}),"
            f" {self.slow} answered after ≥ 1 s, in {self.duration:.1f}s"
        ]
        for pod in self.pods:
            lines.append(
                f"  {pod.name} ({pod.ip}): exit {_fmt(pod.to_exit)}, gone {_fmt(pod.to_gone)},"
                f" unrouted {_fmt(pod.to_unrouted)}, waste {_fmt(pod.waste)} after deletion;"
                f" status {pod.exit_status}{' (SIGKILL)' if pod.killed else ''}"
            )
            if pod.output:
                lines.append(textwrap.indent(pod.output, "    | "))
        lines += [f"  problem: {problem}" for problem in self.problems]
        return "\n".join(lines)

    def median(self, attribute: str) -> float | None:
        values = [v for v in (getattr(pod, attribute) for pod in self.pods) if v is not None]
        return statistics.median(values) if values else None

    def worst(self, attribute: str) -> float | None:
        values = [v for v in (getattr(pod, attribute) for pod in self.pods) if v is not None]
        return max(values) if values else None


def _fmt(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}s"


@dataclass(frozen=True)
class Rollout:
    """How one rollout is run: ``replicas`` pods under ``rate`` requests per
    second; ``warmup`` seconds of traffic to the old pods before the rollout
    and ``tail`` seconds after the last new pod is ready; everything within
    ``timeout``."""

    replicas: int
    rate: float
    grace: int = 30  # the pods' terminationGracePeriodSeconds
    propagation_delay: float = 2.0  # the endpoint drain's, for ``drain`` configurations
    warmup: float = 1.0
    tail: float = 1.0
    timeout: float = 300


def manifests(config: Config, image: str, rollout: Rollout) -> list[dict[str, Any]]:
    """The plugin's access, the configuration, the Service and the Deployment."""
    labels = {"app": "web"}
    supervisor = supervisor_yaml(
        rollout.grace, drain_service="web" if config.drain else None, propagation_delay=rollout.propagation_delay
    )
    pre_stop = None if config.prestop_sleep is None else {"exec": {"command": ["sleep", str(config.prestop_sleep)]}}
    return [
        *supervisor_access(),
        config_map("web-supervisor", supervisor),
        service("web", labels),
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "web"},
            "spec": {
                "replicas": rollout.replicas,
                "selector": {"matchLabels": labels},
                "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": pod_spec(image, "web-supervisor", rollout.grace, pre_stop),
                },
            },
        },
    ]


def run_rollout(node: RealNode, image: str, config: Config, rollout: Rollout, workdir: Path) -> RolloutResult:
    """One rollout of a Deployment of ``image`` in a namespace of its own,
    each old pod stopped as ``config`` says; the namespace is deleted
    afterwards."""
    workdir.mkdir(parents=True, exist_ok=True)
    with (
        namespace(node, f"rollout-{config.name}") as ns,
        PodWatch(node, ns) as pods,
        TaskExits(node) as exits,
    ):
        run = _Run(node, ns, image, config, rollout, pods, exits, workdir)
        run.run()
        return run.result


@dataclass
class _Run:
    """One rollout, from the Deployment to the result."""

    node: RealNode
    namespace: str
    image: str
    config: Config
    rollout: Rollout
    pods: PodWatch
    exits: TaskExits
    workdir: Path
    result: RolloutResult = field(init=False)

    def __post_init__(self) -> None:
        self.result = RolloutResult(self.config)
        self.end = time.monotonic() + self.rollout.timeout

    def kubectl(self, *args: str, input: str | None = None) -> str:
        return self.node.kubectl(*args, "-n", self.namespace, input=input)

    def run(self) -> None:
        for manifest in manifests(self.config, self.image, self.rollout):
            self.kubectl("apply", "-f", "-", input=json.dumps(manifest))
        old = self._ready(self.rollout.replicas)
        cluster_ip = self.kubectl("get", "service", "web", "-o", "jsonpath={.spec.clusterIP}")
        with RulesWatch(self.node.name, f"{self.namespace}/web") as rules:
            if not rules.wait_routed({t.ip for t in old}, self._left()):
                raise RuntimeError(f"kube-proxy never routed {self.namespace}/web to {[t.ip for t in old]}")
            with contextlib.ExitStack() as logs:
                for track in old:
                    logs.enter_context(
                        follow_log(self.node, self.namespace, track.name, self.workdir / f"{track.name}.log")
                    )
                report = self._roll(cluster_ip, old)
        self._count(report["requests"])
        for track in old:
            self._judge(track, rules)
        self.result.problems += [f"pod watch: {e}" for e in self.pods.errors]
        self.result.problems += [f"containerd events: {e}" for e in self.exits.errors]

    def _left(self) -> float:
        return max(self.end - time.monotonic(), 1.0)

    def _ready(self, count: int, exclude: set[str] | None = None) -> list[PodTrack]:
        ready: list[PodTrack] = []

        def enough() -> bool:
            nonlocal ready
            ready = [t for t in self.pods.ready(exclude or set()) if t.ip and t.container_id]
            return len(ready) >= count

        if not self.pods.wait_for(enough, self._left()):
            raise RuntimeError(f"only {len(ready)} of {count} pods of {self.namespace} became ready")
        return ready[:count]

    def _roll(self, cluster_ip: str, old: list[PodTrack]) -> dict[str, Any]:
        """``kubectl rollout restart`` under load; the load generator's report."""
        rollout = self.rollout
        load = Load.start(
            self.node.name,
            self.workdir / f"load-{self.config.name}",
            f"http://{cluster_ip}/",
            rate=rollout.rate,
            count=int(rollout.rate * rollout.timeout),
            max_seconds=rollout.timeout,
        )
        try:
            load.started()
            started = time.monotonic()
            time.sleep(rollout.warmup)  # steady traffic to the old pods before the rollout
            self.kubectl("rollout", "restart", "deployment/web")
            names = {t.name for t in old}
            if not self.pods.wait_for(lambda: all(self.pods.tracks[n].gone for n in names), self._left()):
                self.result.problems.append(f"old pods still there after {rollout.timeout:g}s")
            self._ready(rollout.replicas, exclude=names)  # the rollout is complete
            time.sleep(rollout.tail)  # traffic to the new pods only, to see that it still flows
            load.stop()
            report = load.result(timeout=30)
            self.result.duration = time.monotonic() - started
        finally:
            load.kill()
        return report

    def _count(self, requests: list[list[Any]]) -> None:
        result = self.result
        result.sent = len(requests)
        result.outcomes = dict(collections.Counter(str(r[2]) for r in requests))
        result.failures = [r for r in requests if r[2] != "ok"][:20]
        result.slow = sum(1 for r in requests if r[2] == "ok" and r[1] - r[0] >= 1e9)

    def _judge(self, track: PodTrack, rules: RulesWatch) -> None:
        """One old pod's outcome, on the time of its deletion."""
        deleted = track.deleted
        if deleted is None:
            self.result.problems.append(f"{track.name} was never deleted")
            return
        exit_ = self.exits.exit_of(track.container_id)
        unrouted = rules.unrouted_at(track.ip, deleted)
        status = None if exit_ is None else exit_[1]
        log = self.workdir / f"{track.name}.log"
        tail = "" if status == 0 or not log.exists() else "\n".join(log.read_text(errors="replace").splitlines()[-30:])
        self.result.pods.append(
            PodOutcome(
                track.name,
                track.ip,
                None if exit_ is None else exit_[0] - deleted,
                None if track.gone is None else track.gone - deleted,
                None if unrouted is None else unrouted - deleted,
                status,
                tail,
            )
        )
