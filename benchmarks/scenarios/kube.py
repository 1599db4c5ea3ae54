"""The Kubernetes plugin's scenarios, against the test API server of
``tests/kubeapi`` (the real ``kubernetes`` client over HTTPS):

* memory with the plugin enabled (it connects and reads its pod while idle);
* endpoint drain: the pod's endpoints flip to terminating in 20 Services of
  5,000 endpoints → the main process gets SIGTERM (the end of ``pre_stop``),
  less the configured ``propagation_delay``;
* lease hand-over: the controller exits → a standby holds the Lease, with the
  plugin's release against the same controller under tini, where the standby
  must wait for the Lease to expire.

Each returns its rows "not measured" with the reason when the test server or
the plugin cannot be imported.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import signal
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._bench import REPO, Bench
from .._results import Figure, Row, Target
from .._sandbox import Sandbox, SandboxError
from .._subjects import Subject
from .core import measure_memory

__all__ = ["endpoint_drain", "lease_handover", "memory_with_kubernetes"]

POD = "bench-0"
POD_IP = "10.0.0.7"
WITHOUT_PLUGIN = "without the plugin (under tini)"


def unavailable() -> str | None:
    """Why the Kubernetes scenarios cannot run here, or None."""
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    try:
        for module in ("supervisor_kubernetes", "tests.kubeapi", "tests.kubeapi.controller"):
            importlib.import_module(module)
    except ImportError as exc:
        return f"not measured: {exc} (needs plugins/kubernetes and tests/kubeapi)"
    return None


@dataclass
class KubeEnv:
    server: Any
    cluster: Any
    namespace: str
    account: Path
    env: dict[str, str]

    def plugin_yaml(self, body: str = "") -> str:
        lines = [
            "plugins:",
            "  kubernetes:",
            f"    service_account_dir: '{self.account}'",
            f"    pod: {{name: {POD}, namespace: {self.namespace}}}",
        ]
        lines += [f"    {line}" for line in body.strip("\n").splitlines()]
        return "\n".join(lines) + "\n"

    def wait_for_pod_read(self, timeout: float = 30) -> bool:
        """The plugin's background hook has connected and read its pod."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.server.requests_matching("GET", f"/pods/{POD}$"):
                return True
            time.sleep(0.05)
        return False


@contextlib.contextmanager
def kube_env(bench: Bench) -> Iterator[KubeEnv]:
    from tests.kubeapi import Cluster, KubeAPIServer, client_from

    namespace = f"bench-{uuid.uuid4().hex[:8]}"
    server = KubeAPIServer(namespace=namespace).start()
    saved = {key: os.environ.get(key) for key in ("KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT")}
    try:
        account = server.write_service_account(bench.scratch("serviceaccount"))
        os.environ.update(server.incluster_env())  # the in-cluster loader reads them
        cluster = Cluster(client_from(service_account_dir=str(account)), namespace)
        try:
            yield KubeEnv(server, cluster, namespace, account, server.incluster_env())
        finally:
            cluster.cleanup()
    finally:
        server.close()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


# -- memory -----------------------------------------------------------------------


def memory_with_kubernetes(bench: Bench) -> list[Row]:
    target = Target("≤ 80 MiB", 80.0)
    measure_name = "PSS of the init's processes, idle, one child, Kubernetes plugin enabled"
    anchors = {anchor.name: Figure(note="no Kubernetes integration") for anchor in bench.anchors}
    reason = unavailable()
    if reason:
        return [Row("memory", measure_name, "MiB", target, Figure(note=reason), anchors)]
    bench.say("  supervisor")
    with kube_env(bench) as kube:
        kube.cluster.create_pod(POD, grace=30, ip=POD_IP)
        yaml = kube.plugin_yaml()
        try:
            figure = _memory_after_connect(bench, bench.ours, kube, yaml)
        except SandboxError as exc:
            figure = Figure(problems=[str(exc).splitlines()[0]])
    return [Row("memory", measure_name, "MiB", target, figure, anchors)]


def _memory_after_connect(bench: Bench, subject: Subject, kube: KubeEnv, yaml: str) -> Figure:
    """Measured once the plugin has imported the client and read its pod:
    its steady state for the pod's life."""

    def connected(problems: list[str]) -> None:
        if not kube.wait_for_pod_read():
            problems.append("the plugin never read its pod")

    figure = measure_memory(bench, subject, label="memory-k8s", idle=connected, yaml=yaml, env=kube.env)
    figure.note += ", after the plugin read its pod"
    return figure


# -- endpoint drain ---------------------------------------------------------------


def endpoint_drain(bench: Bench) -> list[Row]:
    services, endpoints = (2, 20) if bench.smoke else (20, 5000)
    propagation = 0.2 if bench.smoke else 1.0
    measure_name = (
        f"endpoints flip ({services} Services, {endpoints:,} endpoints) → pre_stop ends, less propagation_delay"
    )
    target = Target("≤ 100 ms", 100.0)
    anchors = {anchor.name: Figure(note="no endpoint drain") for anchor in bench.anchors}
    reason = unavailable()
    if reason:
        return [Row("endpoint drain", measure_name, "ms", target, Figure(note=reason), anchors)]
    from tests.kubeapi import other_endpoints, pod_endpoints

    bench.say("  supervisor")
    problems: list[str] = []
    value: float | None = None
    note = ""
    with kube_env(bench) as kube:
        pod = kube.cluster.create_pod(POD, grace=30, ip=POD_IP)
        names = [f"svc-{i:02d}" for i in range(services)]
        per_service = endpoints // services
        for i, name in enumerate(names):
            others = other_endpoints(per_service - 1, base=(10, 10 + i))
            kube.cluster.create_service(name, [pod_endpoints(pod, POD_IP), *others])
        yaml = kube.plugin_yaml(
            f"""
endpoint_drain:
  services: [{", ".join(names)}]
  propagation_delay: {propagation:g}s
  fallback_delay: 20s
"""
        )
        try:
            with bench.run(bench.ours, ["term-exit", "{sock}"], label="drain", yaml=yaml, env=kube.env) as run:
                run.ready()
                if not kube.wait_for_pod_read():
                    problems.append("the plugin never read its pod")
                deletion = kube.cluster.delete_pod_and_flip(POD, flip_after=1.0)
                run.sandbox.signal(signal.SIGTERM)  # the kubelet, at the same moment
                term = run.channel.receive(60, "term")
                flipped = deletion.wait_flipped()
                run.expect_exit(problems, 0)
                excess = term.ns / 1e9 - flipped - propagation
                value = excess * 1000
                note = f"SIGTERM {term.ns / 1e9 - flipped:.3f}s after the last flip; propagation_delay {propagation:g}s"
                if excess < 0:
                    problems.append("the main process was stopped before the endpoints had drained")
        except SandboxError as exc:
            problems.append(str(exc).splitlines()[0])
    return [Row("endpoint drain", measure_name, "ms", target, Figure(value, note, problems), anchors)]


# -- lease hand-over --------------------------------------------------------------


def lease_handover(bench: Bench) -> list[Row]:
    retry = 0.5
    duration = 3 if bench.smoke else 5
    measure_name = f"controller exits → standby holds the Lease (retry period {retry:g} s, lease duration {duration} s)"
    target = Target(f"≤ {retry + 0.5:g} s (retry period + 0.5 s)", retry + 0.5)
    reason = unavailable()
    if reason:
        return [Row("lease hand-over", measure_name, "s", target, Figure(note=reason))]
    ours = _handover(bench, bench.ours, retry, duration, with_plugin=True)
    tini = next((a for a in bench.anchors if a.name == "tini"), None)
    anchors: dict[str, Figure] = {}
    if bench.smoke:
        # The baseline only waits for the Lease to expire: nothing to check at smoke size.
        anchors[WITHOUT_PLUGIN] = Figure(note="not measured: smoke run")
    elif tini is not None:
        baseline = anchors[WITHOUT_PLUGIN] = _handover(bench, tini, retry, duration, with_plugin=False)
        # The Lease expires `duration` after its last renewal, which is at
        # most one (jittered) retry period before the controller's exit.
        if baseline.value is not None and baseline.value < duration - retry * 1.2:
            baseline.problems.append(f"the standby took a Lease that had not expired ({duration} s duration)")
    return [Row("lease hand-over", measure_name, "s", target, ours, anchors)]


def _handover(bench: Bench, subject: Subject, retry: float, duration: int, *, with_plugin: bool) -> Figure:
    bench.say(f"  {subject.name}{' with the plugin' if with_plugin else ''}")
    problems: list[str] = []
    lease = "controller-leader"
    with kube_env(bench) as kube:
        kube.cluster.create_pod(POD, grace=30, ip=POD_IP)
        report = bench.scratch("lease") / "controller.txt"
        controller = [
            sys.executable,
            "-m",
            "tests.kubeapi.controller",
            f"--namespace={kube.namespace}",
            f"--lease={lease}",
            f"--identity={POD}_4f2a9c",
            f"--report={report}",
            f"--retry-period={retry:g}",
            f"--lease-duration={duration}",
            "--exit-delay=0",
            f"--service-account-dir={kube.account}",
        ]
        yaml = ""
        if with_plugin:
            yaml = kube.plugin_yaml(f"lease_release:\n  process: main\n  leases: [{{name: {lease}}}]\n")
            yaml = "processes:\n  - name: main\n    main: true\n    command: " + _flow(controller) + "\n" + yaml
        try:
            with bench.run_command(
                subject,
                controller,
                label="lease",
                yaml=yaml,
                env={**kube.env, "PYTHONPATH": str(REPO)},
                main_in_yaml=with_plugin,
            ) as run:
                _wait_until_leading(run.sandbox, report)
                standby = kube.cluster.elector(lease, "standby_77e0b1", retry_period=retry, duration=duration).start()
                time.sleep(retry * 2)
                if standby.leading:
                    problems.append("the standby took a held Lease")
                run.sandbox.signal(signal.SIGTERM)
                run.expect_exit(problems, 0, timeout=30)
                exited = _event(report, "exit")
                end = time.monotonic() + duration * 3 + 5
                while not standby.leading and time.monotonic() < end:
                    time.sleep(0.01)
                if not standby.leading or standby.acquired_at is None or exited is None:
                    problems.append("the standby never acquired the Lease")
                    return Figure(problems=problems)
                return Figure(standby.acquired_at - exited, "", problems)
        except SandboxError as exc:
            problems.append(str(exc).splitlines()[0])
            return Figure(problems=problems)


def _wait_until_leading(sandbox: Sandbox, report: Path) -> None:
    end = time.monotonic() + 60
    while not (report.exists() and "leading" in report.read_text()):
        if time.monotonic() > end or sandbox.proc.poll() is not None:
            raise SandboxError(f"the controller never led\n{sandbox.output()}")
        time.sleep(0.05)


def _event(report: Path, name: str) -> float | None:
    for line in report.read_text().splitlines():
        words = line.split()
        if words and words[0] == name:
            return float(words[1])
    return None


def _flow(argv: list[str]) -> str:
    import json

    return json.dumps(argv)
