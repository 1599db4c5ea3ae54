"""Building the plugin as the host would: settings from a real YAML file,
a Context, a Deadline, and the shutdown hooks called in the plan's order."""

from __future__ import annotations

import logging
import os
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import trio
import yaml
from supervisor_kubernetes import KubernetesPlugin

from supervisor import Context, Deadline, ExitStatus
from tests.cluster import ControlPlane, FaultProxy, Namespace
from tests.plugins._helpers import FakeProcess, configure, make_context

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "kubernetes"
EXAMPLE_ACCOUNT = "example-controller"
EXAMPLE_LEASE = "example-controller-leader"
EXAMPLE_POD = "example-controller-0"
EXAMPLE_SERVICE = "example-controller-webhook"

__all__ = [
    "EXAMPLE_ACCOUNT",
    "EXAMPLE_LEASE",
    "EXAMPLE_POD",
    "EXAMPLE_SERVICE",
    "LOOKED",
    "REPO",
    "Harness",
    "KubeTarget",
    "controllers_held",
    "controllers_held_until_the_plugin_looked",
    "example_documents",
    "example_rbac_without",
    "example_setup",
    "harness",
]

# What the drain logs once it has listed the slices and found them routing.
LOOKED = "still route to this pod"


@contextmanager
def controllers_held(plane: ControlPlane, until: Callable[[], bool], *, limit: float = 20.0) -> Iterator[None]:
    """Hold kube-controller-manager (SIGSTOP) until ``until()`` is true
    (asked every 10 ms from a thread: what the proxy saw, what the plugin
    logged), until the block ends, or for ``limit`` seconds at most.

    This is how a test makes the controller flip the endpoints at the
    moment it needs (once the plugin watches, once its watch has been
    resumed...) rather than after a fixed lag, which a loaded machine
    outlasts.  It never resumes the controllers after the block: a later
    test of the session may be holding them by then."""
    released = threading.Event()
    lock = threading.Lock()

    def release() -> None:
        with lock:
            if not released.is_set():
                released.set()
                plane.resume_controllers()

    def watch() -> None:
        while not released.wait(0.01):
            if until():
                release()

    timer = plane.pause_controllers(limit)
    thread = threading.Thread(target=watch, daemon=True, name="controllers-held")
    thread.start()
    try:
        yield
    finally:
        timer.cancel()
        release()
        thread.join(5)


class _Looked(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.seen = False

    def emit(self, record: logging.LogRecord) -> None:
        self.seen = self.seen or LOOKED in record.getMessage()


@contextmanager
def controllers_held_until_the_plugin_looked(plane: ControlPlane, *, limit: float = 20.0) -> Iterator[None]:
    """Hold the controllers until the drain (in this process) has listed the
    slices and logged that they still route to this pod, so that it sees
    the flip happen through its watch.  A fixed lag is not enough: on a
    loaded machine the plugin's own start can outlast it, and the plugin
    then finds the flip already done."""
    logger = logging.getLogger("supervisor.plugin.kubernetes")
    handler = _Looked()
    old_level = logger.level
    if logger.getEffectiveLevel() > logging.INFO:
        logger.setLevel(logging.INFO)
    logger.addHandler(handler)
    try:
        with controllers_held(plane, lambda: handler.seen, limit=limit):
            yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)


@dataclass
class KubeTarget:
    """The test's namespace on the control plane, and how the plugin (or a
    process under the supervisor) reaches it: in-cluster style, through the
    fault proxy once a test asked for one."""

    cluster: Namespace
    plane: ControlPlane
    service_account_dir: Path
    proxy: FaultProxy | None = None

    @property
    def namespace(self) -> str:
        return self.cluster.name

    @property
    def plugin_yaml(self) -> str:
        return f"service_account_dir: {self.service_account_dir}"

    @property
    def env(self) -> dict[str, str]:
        port = self.proxy.port if self.proxy is not None else self.plane.port
        return {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": str(port)}

    def pod_env(self, pod: str) -> dict[str, str]:
        """The environment of a supervisor run as pod ``pod`` (the downward
        API's name and namespace), with the repository importable."""
        path = os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])
        return {**self.env, "POD_NAME": pod, "POD_NAMESPACE": self.namespace, "PYTHONPATH": path}


@dataclass
class Harness:
    plugin: KubernetesPlugin
    ctx: Context

    async def background(self) -> None:
        """The start-up hook (connect, learn the pod, check the settings)
        until all that is left is following the Services, which the shutdown
        would cancel: the index stays as it was then."""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(lambda: self.plugin.supervisor_background(ctx=self.ctx))
            await self.plugin.settled.wait()
            nursery.cancel_scope.cancel()

    async def shutdown_started(self, deadline: Deadline, reason: str = "SIGTERM") -> None:
        with deadline.scope():
            await self.plugin.supervisor_shutdown_started(ctx=self.ctx, deadline=deadline, reason=reason)

    async def pre_stop(self, deadline: Deadline) -> float:
        """Run the hook under the deadline as the host does; returns when it
        ended (time.monotonic(), comparable with the scenario's clocks)."""
        with deadline.scope():
            await self.plugin.supervisor_pre_stop(ctx=self.ctx, deadline=deadline)
        deadline.hand_back()  # as the plan does once the stops begin
        return time.monotonic()

    async def after_stop(self, deadline: Deadline, process: str = "controller") -> None:
        info = FakeProcess(process, running=False, status=ExitStatus(code=0))
        deadline.nothing_left_to_stop()  # the plan's one process has stopped
        with deadline.scope():
            await self.plugin.supervisor_after_process_stop(
                ctx=self.ctx, deadline=deadline, process=info, status=info.status
            )


def harness(kube: KubeTarget, tmp_path: Path, pod: str, section: str = "") -> Harness:
    """The plugin configured from YAML (call inside trio)."""
    body = textwrap.indent(textwrap.dedent(section).strip("\n"), "    ")
    yaml = (
        "processes:\n"
        "  - name: controller\n"
        "    command: ['true']\n"
        "    main: true\n"
        "plugins:\n"
        "  kubernetes:\n"
        f"    {kube.plugin_yaml}\n"
        f"    pod: {{name: {pod}, namespace: {kube.namespace}}}\n"
        f"{body}\n"
    )
    plugin = KubernetesPlugin()
    parsed, config = configure(plugin, tmp_path, yaml, "kubernetes")  # type: ignore[arg-type]
    return Harness(plugin, make_context("kubernetes", parsed, config))


def example_documents(*names: str) -> list[dict[str, Any]]:
    """The documents of files in examples/kubernetes."""
    return [d for name in names for d in yaml.safe_load_all((EXAMPLE / name).read_text()) if d]


def example_rbac_without(group: str, resource: str, verb: str) -> list[dict[str, Any]]:
    """The example's Role and RoleBinding with one verb taken out."""
    documents = example_documents("rbac.yaml")
    for document in documents:
        for rule in document.get("rules") or []:
            if group in rule["apiGroups"] and resource in rule["resources"]:
                rule["verbs"] = [v for v in rule["verbs"] if v != verb]
        if document.get("rules") is not None:
            document["rules"] = [r for r in document["rules"] if r["verbs"]]
    return documents


def example_setup(kube: KubeTarget, tmp_path: Path, rbac: list[dict[str, Any]]) -> KubeTarget:
    """The example's ServiceAccount, Role, RoleBinding and Service applied
    with kubectl; a pod behind the Service holding the Lease, and the
    standby; the plugin with that account's token."""
    ns = kube.cluster
    documents = example_documents("serviceaccount.yaml", "service.yaml") + rbac
    ns.plane.kubectl("apply", "-n", ns.name, "-f", "-", input=yaml.safe_dump_all(documents))
    container = {
        "name": "main",
        "image": "registry.invalid/none:latest",
        "ports": [{"name": "webhook", "containerPort": 9443}],
    }
    # The Deployment's two replicas: the leader (this pod) and the standby.
    pods = [
        ns.kubelet.run_pod(
            name,
            labels={"app.kubernetes.io/name": "example-controller"},
            ips=[ip],
            service_account=EXAMPLE_ACCOUNT,
            spec={"containers": [container]},
        )
        for name, ip in ((EXAMPLE_POD, "10.244.0.7"), ("example-controller-1", "10.244.0.8"))
    ]
    ns.wait_endpoints(EXAMPLE_SERVICE, pods)
    ns.create_lease(EXAMPLE_LEASE, f"{EXAMPLE_POD}_0c1d2e")
    account = ns.service_account_dir(tmp_path / "example-sa", EXAMPLE_ACCOUNT)
    return KubeTarget(ns, kube.plane, account, proxy=kube.proxy)
