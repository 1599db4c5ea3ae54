"""A rolling update under load, measured: a Deployment behind a ClusterIP
Service on the node, a steady load through the ClusterIP from the node's
namespace, and a rollout (a change to the pod template) that replaces every
pod, with the Deployment controller's ``maxSurge: 1, maxUnavailable: 0``.

Three ways to stop the same app (``app.py``, which stops listening at
SIGTERM), each the supervisor as PID 1 with the app as its main process:

* ``no-prestop``: nothing before the SIGTERM (what many deployments do);
* ``prestop-sleep``: ``preStop: exec: sleep 15`` (the classic);
* ``endpoint-drain``: the Kubernetes plugin's ``endpoint_drain`` (no preStop).

For each old pod: deletion (the kubelet's watch event), PID 1's exit, the
final delete, and the moment kube-proxy's rules stopped sending the
Service's traffic to it (``RulesWatch``).  The waste of a pod's grace period
is its exit less that moment: the time it stayed up after traffic had
stopped reaching it (negative: it was gone while traffic still came).
"""

from __future__ import annotations

import collections
import contextlib
import statistics
import sys
import textwrap
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ._kubelet import PodRecord
from ._node import Node
from ._pod import log_tail
from ._rules import RulesWatch

__all__ = ["CONFIGS", "Config", "PodOutcome", "Rollout", "RolloutResult", "run_rollout"]

HERE = Path(__file__).resolve().parent
APP = HERE / "app.py"
SUPERVISOR = str(Path(sys.executable).parent / "supervisor")
APP_PORT = 8080
FAILED = ("refused", "reset", "timeout", "http_5xx", "http_other", "error")


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
    to_gone: float | None  # deletion → the final delete returned
    to_unrouted: float | None  # deletion → kube-proxy's rules no longer name it
    exit_status: int | None
    killed: bool
    output: str = ""  # the container's last lines, when it did not exit 0

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


def supervisor_yaml(config: Config, grace: int, propagation_delay: float) -> str:
    lines = [
        f"grace_period: {grace - 1}s",
        "log: {format: text, level: info}",
        "processes:",
        "  - name: app",
        "    main: true",
        f"    command: [{sys.executable}, {APP}, --port, '{APP_PORT}']",
        "    stop_timeout: 10s",
    ]
    if config.drain:
        lines += [
            "plugins:",
            "  kubernetes:",
            "    endpoint_drain:",
            "      services: [web]",
            f"      propagation_delay: {propagation_delay:g}s",
            "      timeout: 20s",
        ]
    return "\n".join(lines) + "\n"


def deployment(config: Config, replicas: int, grace: int, config_file: Path) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": "app",
        "image": "pid1-supervisor/rollout-app:test",
        "command": [SUPERVISOR, "-c", str(config_file)],
        "env": [
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
            {"name": "POD_UID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}},
            {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        ],
        "ports": [{"name": "http", "containerPort": APP_PORT}],
        "readinessProbe": {"httpGet": {"path": "/healthz", "port": "http"}, "periodSeconds": 1},
    }
    if config.prestop_sleep is not None:
        container["lifecycle"] = {"preStop": {"exec": {"command": ["sleep", str(config.prestop_sleep)]}}}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "web"}},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
            "template": {
                "metadata": {"labels": {"app": "web"}, "annotations": {"rollout": "0"}},
                "spec": {
                    "serviceAccountName": "web",
                    "terminationGracePeriodSeconds": grace,
                    "containers": [container],
                },
            },
        },
    }


def _namespace_objects(namespace: str) -> list[tuple[str, dict[str, Any]]]:
    """The Service, the ServiceAccount and the plugin's RBAC (the rules of
    examples/kubernetes/rbac.yaml that the drain needs)."""
    return [
        ("service_account", {"metadata": {"name": "web"}}),
        (
            "service",
            {
                "metadata": {"name": "web"},
                "spec": {"selector": {"app": "web"}, "ports": [{"name": "http", "port": 80, "targetPort": "http"}]},
            },
        ),
        (
            "role",
            {
                "metadata": {"name": "web-supervisor"},
                "rules": [
                    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]},
                    {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list", "watch"]},
                ],
            },
        ),
        (
            "role_binding",
            {
                "metadata": {"name": "web-supervisor"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "web-supervisor"},
                "subjects": [{"kind": "ServiceAccount", "name": "web", "namespace": namespace}],
            },
        ),
    ]


class _Api:
    def __init__(self, api: Any) -> None:
        from kubernetes import client

        self.core: Any = client.CoreV1Api(api)
        self.apps: Any = client.AppsV1Api(api)
        self.rbac: Any = client.RbacAuthorizationV1Api(api)

    def create(self, namespace: str, kind: str, body: dict[str, Any]) -> None:
        group = self.rbac if kind.startswith("role") else self.core
        getattr(group, f"create_namespaced_{kind}")(namespace, body, _preload_content=False)


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
    timeout: float = 180


def run_rollout(node: Node, api: Any, config: Config, rollout: Rollout) -> RolloutResult:
    """One rollout of the Deployment's pods, each stopped as ``config`` says."""
    kube = _Api(api)
    namespace = f"rollout-{config.name}-{uuid.uuid4().hex[:6]}"
    kube.core.create_namespace({"metadata": {"name": namespace}}, _preload_content=False)
    run = _Run(node, kube, namespace, config, rollout)
    try:
        run.run()
    finally:
        with contextlib.suppress(Exception):
            kube.apps.delete_namespaced_deployment("web", namespace, _preload_content=False)
        node.kubelet.wait_gone(
            [k for k in node.kubelet.records if k.startswith(f"{namespace}/")], timeout=rollout.grace + 30
        )
        with contextlib.suppress(Exception):
            kube.core.delete_namespace(namespace, _preload_content=False)
    return run.result


@dataclass
class _Run:
    """One rollout in its own namespace, from the Deployment to the result."""

    node: Node
    kube: _Api
    namespace: str
    config: Config
    rollout: Rollout
    result: RolloutResult = field(init=False)

    def __post_init__(self) -> None:
        self.result = RolloutResult(self.config)

    def run(self) -> None:
        end = time.monotonic() + self.rollout.timeout
        cluster_ip = self._deploy()
        old = _wait_ready_pods(self.node, self.namespace, self.rollout.replicas, end)
        rules, report = self._roll(cluster_ip, old, end)
        self._count(report["requests"])
        for key in old:
            self._judge(self.node.kubelet.records[key], rules)
        self.result.problems += self.node.kubelet.errors

    def _deploy(self) -> str:
        """The namespace's objects and the Deployment; the Service's ClusterIP."""
        rollout, namespace = self.rollout, self.namespace
        self.node.kubelet.serve(namespace)
        for kind, body in _namespace_objects(namespace):
            self.kube.create(namespace, kind, body)
        config_file = self.node.workdir / f"{namespace}.yaml"
        config_file.write_text(supervisor_yaml(self.config, rollout.grace, rollout.propagation_delay))
        self.kube.apps.create_namespaced_deployment(
            namespace, deployment(self.config, rollout.replicas, rollout.grace, config_file), _preload_content=False
        )
        service = self.kube.core.read_namespaced_service("web", namespace)
        return str(service.spec.cluster_ip)

    def _roll(self, cluster_ip: str, old: list[str], end: float) -> tuple[RulesWatch, dict[str, Any]]:
        """The rollout under load, watching kube-proxy's rules throughout;
        the rules seen and the load generator's report."""
        node, rollout = self.node, self.rollout
        with node.rules(f"{self.namespace}/web") as rules:
            if not rules.wait_routed({node.kubelet.records[key].ip for key in old}, max(end - time.monotonic(), 1)):
                raise RuntimeError(
                    f"kube-proxy never routed {self.namespace}/web to its {rollout.replicas} pods: {rules.errors}"
                )
            load = node.load(
                f"http://{cluster_ip}/",
                rate=rollout.rate,
                count=int(rollout.rate * rollout.timeout),
                max_seconds=rollout.timeout,
            )
            load.started()
            started = time.monotonic()
            time.sleep(rollout.warmup)  # steady traffic to the old pods before the rollout
            self.kube.apps.patch_namespaced_deployment(
                "web", self.namespace, {"spec": {"template": {"metadata": {"annotations": {"rollout": "1"}}}}}
            )
            if not node.kubelet.wait_gone(old, max(end - time.monotonic(), 1)):
                self.result.problems.append(f"old pods still there after {rollout.timeout:g}s")
            _wait_ready_pods(node, self.namespace, rollout.replicas, end, exclude=set(old))
            time.sleep(rollout.tail)  # traffic to the new pods only, to see that it still flows
            load.stop()
            report = load.result(timeout=30)
            self.result.duration = time.monotonic() - started
        return rules, report

    def _count(self, requests: list[list[Any]]) -> None:
        result = self.result
        result.sent = len(requests)
        result.outcomes = dict(collections.Counter(str(r[2]) for r in requests))
        result.failures = [r for r in requests if r[2] != "ok"][:20]
        result.slow = sum(1 for r in requests if r[2] == "ok" and r[1] - r[0] >= 1e9)

    def _judge(self, record: PodRecord, rules: RulesWatch) -> None:
        """One old pod's outcome, on the time of its deletion."""
        deleted = record.deleted
        if deleted is None:
            self.result.problems.append(f"{record.name} was never deleted")
            return
        unrouted = rules.unrouted_at(record.ip, deleted)
        self.result.pods.append(
            PodOutcome(
                record.name,
                record.ip,
                None if record.exited is None else record.exited - deleted,
                None if record.gone is None else record.gone - deleted,
                None if unrouted is None else unrouted - deleted,
                record.exit_status,
                record.sigkill is not None,
                "" if record.exit_status == 0 or record.log is None else log_tail(record.log, 30),
            )
        )
        self.result.problems += [f"{record.name}: {problem}" for problem in record.problems]


def _wait_ready_pods(node: Node, namespace: str, count: int, end: float, exclude: set[str] | None = None) -> list[str]:
    """Keys of ``count`` ready, not deleted pods of ``namespace``."""
    while True:
        ready = [
            key
            for key, record in list(node.kubelet.records.items())
            if record.namespace == namespace
            and record.ready is not None
            and record.deleted is None
            and key not in (exclude or set())
        ]
        if len(ready) >= count:
            return ready[:count]
        if node.kubelet.errors:
            raise RuntimeError(f"the kubelet failed: {node.kubelet.errors}")
        if time.monotonic() > end:
            raise RuntimeError(f"only {len(ready)} of {count} pods of {namespace} became ready")
        time.sleep(0.05)
