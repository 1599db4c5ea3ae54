"""The Kubernetes plugin's scenarios, against the real control plane of
``tests/cluster`` (etcd, kube-apiserver, kube-controller-manager built from
k8s.io/kubernetes, the pods played by the tests' kubelet):

* memory with the plugin enabled (it connects and reads its pod while idle);
* endpoint drain: the pod is deleted → the real EndpointSlice controller
  flips its endpoints in every Service → the main process gets SIGTERM (the
  end of ``pre_stop``), less ``propagation_delay``; both legs are reported;
* drain cost: objects and bytes the plugin reads from the API server per
  pod shutdown, in a namespace of 10 and of 2,000 Services (the drain reads
  only the slices of the Services that select the pod, so the two match);
* lease hand-over: a controller-runtime manager (leader election with its
  defaults, ReleaseOnCancel off) exits → the standby manager leads; with the
  plugin's release, without it (the Lease expires), and with
  ReleaseOnCancel on (the in-process release), in one run.

Each returns its rows "not measured" with the reason when the control plane
cannot be built or the plugin cannot be imported.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import re
import signal
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._bench import REPO, Bench
from .._results import Figure, Row, Target
from .._sandbox import Sandbox, SandboxError
from .._subjects import Subject
from .core import measure_memory

__all__ = ["drain_cost", "endpoint_drain", "lease_handover", "memory_with_kubernetes"]

POD = "bench-0"
POD_IP = "10.244.0.7"
WITHOUT_PLUGIN = "without the plugin (under tini)"
RELEASE_ON_CANCEL = "LeaderElectionReleaseOnCancel (under tini)"
# controller-runtime's leader election defaults.
LEASE_DURATION, RETRY_PERIOD = 15.0, 2.0


def unavailable() -> str | None:
    """Why the Kubernetes scenarios cannot run here, or None."""
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    try:
        importlib.import_module("supervisor_kubernetes")
        cluster = importlib.import_module("tests.cluster")
        cluster.binaries()
    except ImportError as exc:
        return f"not measured: {exc} (needs plugins/kubernetes and tests/cluster)"
    except RuntimeError as exc:
        return f"not measured: the control plane could not be built: {str(exc).splitlines()[0]}"
    return None


@dataclass
class KubeEnv:
    plane: Any  # tests.cluster.ControlPlane
    ns: Any  # tests.cluster.Namespace
    account: Path
    env: dict[str, str]

    def other_namespace(self, bench: Bench, name: str) -> KubeEnv:
        """A second namespace on the same control plane (cleaned up by the caller)."""
        from tests.cluster import Namespace

        ns = Namespace(self.plane)
        return KubeEnv(self.plane, ns, ns.service_account_dir(bench.scratch(name)), self.env)

    @property
    def namespace(self) -> str:
        return str(self.ns.name)

    def plugin_yaml(self, body: str = "", pod: str = POD) -> str:
        # Debug level: "connected as pod" tells when the plugin has read its pod.
        lines = [
            "log: {level: debug}",
            "plugins:",
            "  kubernetes:",
            f"    service_account_dir: '{self.account}'",
            f"    pod: {{name: {pod}, namespace: {self.namespace}}}",
        ]
        lines += [f"    {line}" for line in body.strip("\n").splitlines()]
        return "\n".join(lines) + "\n"


def wait_for_pod_read(sandbox: Sandbox, timeout: float = 30) -> bool:
    """The plugin's background hook has connected and read its pod."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if "connected as pod" in sandbox.output(lines=10_000):
            return True
        time.sleep(0.05)
    return False


@contextlib.contextmanager
def kube_env(bench: Bench) -> Iterator[KubeEnv]:
    from tests.cluster import ControlPlane, Namespace

    saved = {key: os.environ.get(key) for key in ("KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT")}
    with ControlPlane(bench.scratch("cluster")) as plane:
        ns = Namespace(plane)
        env = {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": str(plane.port)}
        try:
            account = ns.service_account_dir(bench.scratch("serviceaccount"))
            os.environ.update(env)  # the in-cluster loader reads them
            yield KubeEnv(plane, ns, account, env)
        finally:
            ns.cleanup()
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value


# -- memory -----------------------------------------------------------------------


def memory_with_kubernetes(bench: Bench) -> list[Row]:
    target = Target("≤ 40 MiB", 40.0)
    measure_name = "PSS of the init's processes, idle, one child, Kubernetes plugin enabled"
    anchors = {anchor.name: Figure(note="no Kubernetes integration") for anchor in bench.anchors}
    reason = unavailable()
    if reason:
        return [Row("memory", measure_name, "MiB", target, Figure(note=reason), anchors)]
    bench.say("  supervisor")
    with kube_env(bench) as kube:
        kube.ns.run_pod(POD, ips=[POD_IP])
        try:
            figure = _memory_after_connect(bench, bench.ours, kube, kube.plugin_yaml())
        except SandboxError as exc:
            figure = Figure(problems=[str(exc).splitlines()[0]])
    return [Row("memory", measure_name, "MiB", target, figure, anchors)]


def _memory_after_connect(bench: Bench, subject: Subject, kube: KubeEnv, yaml: str) -> Figure:
    """Measured once the plugin has imported the client and read its pod:
    its steady state for the pod's life.  The log file is the only witness,
    so it is found through the sandbox the measure creates."""
    workdirs = set(bench.workdir.iterdir())

    def connected(problems: list[str]) -> None:
        end = time.monotonic() + 30
        while time.monotonic() < end:
            for path in set(bench.workdir.iterdir()) - workdirs:
                if any("connected as pod" in log.read_text(errors="replace") for log in path.glob("*.log")):
                    return
            time.sleep(0.05)
        problems.append("the plugin never read its pod")

    figure = measure_memory(bench, subject, label="memory-k8s", idle=connected, yaml=yaml, env=kube.env)
    figure.note += ", after the plugin read its pod"
    return figure


# -- endpoint drain ---------------------------------------------------------------


def endpoint_drain(bench: Bench) -> list[Row]:
    services, others = (2, 4) if bench.smoke else (20, 25)
    propagation = 0.2 if bench.smoke else 1.0
    pods = services * others + 1
    measure_name = (
        f"EndpointSlice controller flips the pod's endpoints ({services} Services, {pods} pods) "
        "→ pre_stop ends, less propagation_delay"
    )
    target = Target("≤ 100 ms", 100.0)
    anchors = {anchor.name: Figure(note="no endpoint drain") for anchor in bench.anchors}
    reason = unavailable()
    if reason:
        return [Row("endpoint drain", measure_name, "ms", target, Figure(note=reason), anchors)]
    bench.say("  supervisor")
    with kube_env(bench) as kube:
        figure = _drain(bench, kube, services, others, propagation)
    return [Row("endpoint drain", measure_name, "ms", target, figure, anchors)]


def _drain(bench: Bench, kube: KubeEnv, services: int, others: int, propagation: float) -> Figure:
    names = [f"svc-{i:02d}" for i in range(services)]
    ns = kube.ns
    pod = ns.run_pod(POD, ips=[POD_IP], labels={name: "yes" for name in names})
    for i, name in enumerate(names):
        ns.create_service(name, {name: "yes"})
        members = [
            ns.run_pod(f"{name}-{j}", ips=[f"10.244.{i + 1}.{j + 1}"], labels={name: "yes"}) for j in range(others)
        ]
        ns.wait_endpoints(name, [pod, *members])
    yaml = kube.plugin_yaml(
        f"""
endpoint_drain:
  services: [{", ".join(names)}]
  propagation_delay: {propagation:g}s
  fallback_delay: 20s
"""
    )
    problems: list[str] = []
    try:
        with bench.run(bench.ours, ["term-exit", "{sock}"], label="drain", yaml=yaml, env=kube.env) as run:
            run.ready()
            if not wait_for_pod_read(run.sandbox):
                problems.append("the plugin never read its pod")
            watch = ns.watch_slices(pod)
            deleted = time.monotonic()
            ns.delete_pod(POD)
            run.sandbox.signal(signal.SIGTERM)  # the kubelet, at the same moment
            term = run.channel.receive(60, "term")
            flipped = watch.wait_flipped()
            run.expect_exit(problems, 0)
    except SandboxError as exc:
        return Figure(problems=[*problems, str(exc).splitlines()[0]])
    excess = term.ns / 1e9 - flipped - propagation
    note = (
        f"deletion → controller flipped every endpoint {(flipped - deleted) * 1000:.0f} ms; "
        f"flip → SIGTERM {term.ns / 1e9 - flipped:.3f} s with propagation_delay {propagation:g} s"
    )
    if excess < 0:
        problems.append("the main process was stopped before the endpoints had drained")
    return Figure(excess * 1000, note, problems)


# -- drain cost -------------------------------------------------------------------

# Shutdowns per namespace size; the median is the figure.
_COST_RUNS = 3


def drain_cost(bench: Bench) -> list[Row]:
    """Objects and bytes read per pod shutdown, the namespace's Services
    10 and 2,000 (smoke: 10 and 50): the same within 10 %."""
    small, large = (10, 50) if bench.smoke else (10, 2000)
    rows = [
        ("objects", f"objects read from the API server per pod shutdown, {large:,} Services in the namespace"),
        ("bytes", f"bytes read from the API server per pod shutdown, {large:,} Services in the namespace"),
    ]
    reason = unavailable()
    if reason:
        return [
            Row("drain cost", measure, unit, Target(f"≤ 1.1 × with {small} Services", None), Figure(note=reason))
            for unit, measure in rows
        ]
    figures: dict[int, tuple[int, int] | list[str]] = {}
    with kube_env(bench) as kube:
        for count in (small, large):
            bench.say(f"  supervisor, {count} Services")
            env = kube.other_namespace(bench, f"cost-{count}")
            try:
                figures[count] = _shutdown_reads(bench, env, count)
            finally:
                env.ns.cleanup()
    result = []
    for index, (unit, measure) in enumerate(rows):
        base, big = figures[small], figures[large]
        if isinstance(base, list) or isinstance(big, list):
            problems = [p for f in (base, big) if isinstance(f, list) for p in f]
            result.append(
                Row("drain cost", measure, unit, Target("≤ 1.1 × the small namespace", None), Figure(problems=problems))
            )
            continue
        target = Target(f"≤ 1.1 × with {small} Services ({base[index]:,})", base[index] * 1.1)
        note = (
            f"median of {_COST_RUNS} shutdowns; {small} Services: {base[index]:,}; "
            "the drain reads only the slices of the Services that select the pod"
        )
        result.append(Row("drain cost", measure, unit, target, Figure(float(big[index]), note)))
    return result


def _shutdown_reads(bench: Bench, kube: KubeEnv, services: int) -> tuple[int, int] | list[str]:
    """Pod shutdowns in a namespace of ``services`` Services (one of them
    selects the pods, each deleted with another still serving): the median
    of what the plugin logged it read from SIGTERM to the end of the drain,
    or the problems.  A shutdown reads a handful of objects, and whether the
    controller's flip arrives as one watch event or two is its own affair:
    one run alone would say little."""
    ns = kube.ns
    pods = [ns.run_pod(f"bench-{i}", ips=[f"10.244.0.{i + 7}"], labels={"app": "web"}) for i in range(_COST_RUNS + 1)]
    ns.create_service("web", {"app": "web"})
    for index in range(services - 1):
        ns.create_service(f"other-{index:04d}", {"app": f"other-{index:04d}"})
    ns.wait_endpoints("web", pods)
    problem = _wait_controller_caught_up(ns, services)
    if problem:
        return [problem]
    reads: list[tuple[int, int]] = []
    for i in range(_COST_RUNS):
        read = _one_shutdown_read(bench, kube, f"bench-{i}", services)
        if isinstance(read, list):
            return read
        reads.append(read)
    return int(statistics.median(r[0] for r in reads)), int(statistics.median(r[1] for r in reads))


def _wait_controller_caught_up(ns: Any, services: int, timeout: float = 600) -> str | None:
    """Until the EndpointSlice controller has made a slice for every Service.

    It writes them at its client's rate limit (20 requests per second by
    default), so it can still be making slices when the last of 2,000
    Services exists; a pod deleted meanwhile waits in its queue behind them
    (25 s and more, seen here), and the drain then measures that queue (it
    timed out, and read a watch bookmark besides) instead of a shutdown in a
    big namespace.  A namespace that has had its Services for a while, as a
    production one has, is the case to measure."""
    from tests.cluster._namespace import SERVICE_LABEL

    end = time.monotonic() + timeout
    while time.monotonic() < end:
        named = {(item.get("metadata") or {}).get("labels", {}).get(SERVICE_LABEL) for item in ns.list_slices()}
        if len(named - {None}) >= services:
            return None
        time.sleep(1)
    return f"the EndpointSlice controller made no slice for some of the {services} Services within {timeout:.0f} s"


def _one_shutdown_read(bench: Bench, kube: KubeEnv, pod: str, services: int) -> tuple[int, int] | list[str]:
    from tests.kubernetes.k8s_helpers import controllers_held

    yaml = kube.plugin_yaml("endpoint_drain: {propagation_delay: 0.2s, fallback_delay: 20s}", pod=pod)
    problems: list[str] = []
    try:
        with bench.run(bench.ours, ["term-exit", "{sock}"], label=f"cost-{services}", yaml=yaml, env=kube.env) as run:
            run.ready()
            if not _wait_for_output(run.sandbox, "Services that select this pod: web"):
                return ["the plugin never found the Service that selects its pod"]
            # The controller flips once the plugin has looked, so that each
            # run reads the same: the list, then the flip through the watch.
            with controllers_held(kube.plane, lambda: "still route to this pod" in run.sandbox.output(lines=10_000)):
                kube.ns.delete_pod(pod)
                run.sandbox.signal(signal.SIGTERM)
                run.channel.receive(60, "term")
            run.expect_exit(problems, 0)
            output = run.sandbox.output(lines=10_000)
    except SandboxError as exc:
        return [*problems, str(exc).splitlines()[0]]
    match = re.search(r"read (\d+) objects \((\d+) bytes\) from the API server since the shutdown began", output)
    if match is None:
        return [*problems, "the plugin did not log what it read"]
    if "endpoint drain timed out" in output:
        # What it read then measures the controller's delay, not the drain.
        problems.append("the drain timed out before the controller took the pod out of its Service")
    if problems:
        return problems
    return int(match.group(1)), int(match.group(2))


def _wait_for_output(sandbox: Sandbox, text: str, timeout: float = 60) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if text in sandbox.output(lines=10_000):
            return True
        time.sleep(0.05)
    return False


# -- lease hand-over --------------------------------------------------------------


def lease_handover(bench: Bench) -> list[Row]:
    measure_name = (
        "controller-runtime manager exits → standby manager leads "
        f"(lease {LEASE_DURATION:g} s, retry period {RETRY_PERIOD:g} s: controller-runtime's defaults)"
    )
    # client-go tries again every RetryPeriod plus a random jitter of up to
    # 1.2 RetryPeriods: a released Lease is taken within 2.2 RetryPeriods.
    most = RETRY_PERIOD * 2.2 + 0.5
    target = Target(f"≤ {most:g} s (the standby's jittered retry, 2.2 × retry period, + 0.5 s)", most)
    reason = unavailable()
    if reason:
        return [Row("lease hand-over", measure_name, "s", target, Figure(note=reason))]
    tini = next((a for a in bench.anchors if a.name == "tini"), None)
    anchors: dict[str, Figure] = {}
    with kube_env(bench) as kube:
        runs = 1 if bench.smoke else 3
        ours = _median_of(
            runs, lambda i: _handover(bench, kube, bench.ours, lease=f"with-plugin-{i}", with_plugin=True)
        )
        if tini is None:
            anchors[WITHOUT_PLUGIN] = anchors[RELEASE_ON_CANCEL] = Figure(note="not measured: no tini")
        else:
            anchors[RELEASE_ON_CANCEL] = _median_of(
                runs, lambda i: _handover(bench, kube, tini, lease=f"release-on-cancel-{i}", release_on_cancel=True)
            )
            if bench.smoke:
                # Only waits for the Lease to expire: nothing to check at smoke size.
                anchors[WITHOUT_PLUGIN] = Figure(note="not measured: smoke run")
            else:
                baseline = anchors[WITHOUT_PLUGIN] = _handover(bench, kube, tini, lease="no-release")
                # The Lease expires a lease duration after its last renewal,
                # at most one (jittered) retry period before the exit.
                if baseline.value is not None and baseline.value < LEASE_DURATION - RETRY_PERIOD * 1.2:
                    baseline.problems.append("the standby took a Lease that had not expired")
    return [Row("lease hand-over", measure_name, "s", target, ours, anchors)]


def _median_of(runs: int, measure: Callable[[int], Figure]) -> Figure:
    """The median of ``runs`` hand-overs: each lands anywhere in the
    standby's jittered retry, so one sample says little."""
    figures = [measure(i) for i in range(runs)]
    values = [f.value for f in figures if f.value is not None]
    problems = [p for f in figures for p in f.problems]
    if len(values) < runs:
        return Figure(problems=problems or ["a hand-over was not measured"])
    if runs == 1:
        return figures[0]
    note = f"median of {runs}: " + ", ".join(f"{v:.2f}" for v in values) + f"; {figures[0].note}"
    return Figure(statistics.median(values), note, problems)


def _handover(
    bench: Bench,
    kube: KubeEnv,
    subject: Subject,
    *,
    lease: str,
    with_plugin: bool = False,
    release_on_cancel: bool = False,
) -> Figure:
    from tests.cluster import Manager, manager_command, read_report

    how = " with the plugin" if with_plugin else " with ReleaseOnCancel" if release_on_cancel else ""
    bench.say(f"  {subject.name}{how}")
    problems: list[str] = []
    report = bench.scratch("lease") / "controller.jsonl"
    controller = manager_command(
        kube.plane,
        kube.namespace,
        lease=lease,
        release_on_cancel=release_on_cancel,
        kubeconfig=kube.plane.admin_kubeconfig,
        report=report,
    )
    yaml = ""
    if with_plugin:
        yaml = kube.plugin_yaml(f"lease_release:\n  process: main\n  leases: [{{name: {lease}}}]\n")
        yaml = "processes:\n  - name: main\n    main: true\n    command: " + json.dumps(controller) + "\n" + yaml
    standby_log = report.with_name("standby.log")
    standby = Manager(kube.plane, kube.namespace, "bench-1", lease=lease, log=standby_log)
    try:
        with bench.run_command(
            subject, controller, label="lease", yaml=yaml, env={**kube.env, "POD_NAME": POD}, main_in_yaml=with_plugin
        ) as run:
            _wait_until_leading(run.sandbox, report)
            standby.start()
            standby.wait_trying()
            run.sandbox.signal(signal.SIGTERM)
            run.expect_exit(problems, 0, timeout=30)
            exited = read_report(report).get("stopped")
            try:
                acquired = standby.wait_leading(LEASE_DURATION * 2 + 5)
            except AssertionError as exc:
                return Figure(problems=[*problems, str(exc)])
            if exited is None:
                return Figure(problems=[*problems, "the manager never reported its exit"])
            if acquired < exited:
                # Trying since before the SIGTERM, it led while the holder ran.
                problems.append("the standby took a held Lease")
            note = (
                "the standby's next retry falls anywhere in 0-2.2 retry periods after the release"
                if with_plugin or release_on_cancel
                else "the Lease expired: a lease duration after its last renewal"
            )
            return Figure(acquired - exited, note, problems)
    except SandboxError as exc:
        return Figure(problems=[*problems, str(exc).splitlines()[0]])
    finally:
        standby.stop()


def _wait_until_leading(sandbox: Sandbox, report: Path) -> None:
    from tests.cluster import read_report

    end = time.monotonic() + 60
    while "leading" not in read_report(report):
        if time.monotonic() > end or sandbox.proc.poll() is not None:
            raise SandboxError(f"the manager never led\n{sandbox.output()}")
        time.sleep(0.05)
