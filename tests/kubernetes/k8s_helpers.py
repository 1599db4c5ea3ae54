"""Building the plugin as the host would: settings from a real YAML file,
a Context, a Deadline, and the shutdown hooks called in the plan's order."""

from __future__ import annotations

import logging
import textwrap
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from supervisor_kubernetes import KubernetesPlugin

from supervisor import Context, Deadline, ExitStatus
from tests.cluster import ControlPlane, FaultProxy, Namespace
from tests.plugins._helpers import FakeProcess, configure, make_context

__all__ = ["Harness", "KubeTarget", "controllers_held_until_the_plugin_looked", "harness"]

# What the drain logs once it has listed the slices and found them routing.
_LOOKED = "still route to this pod"


class _ResumeWhenLogged(logging.Handler):
    def __init__(self, plane: ControlPlane) -> None:
        super().__init__(logging.INFO)
        self.plane = plane
        self.seen = False

    def emit(self, record: logging.LogRecord) -> None:
        if not self.seen and _LOOKED in record.getMessage():
            self.seen = True
            self.plane.resume_controllers()


@contextmanager
def controllers_held_until_the_plugin_looked(plane: ControlPlane, *, limit: float = 20.0) -> Iterator[None]:
    """Hold kube-controller-manager (SIGSTOP) until the drain has listed the
    slices and logged that they still route to this pod, so that it sees the
    flip happen through its watch.  A fixed lag is not enough: on a loaded
    machine the plugin's own start can outlast it, and the plugin then finds
    the flip already done.  ``limit`` bounds the hold whatever happens."""
    logger = logging.getLogger("supervisor.plugin.kubernetes")
    handler = _ResumeWhenLogged(plane)
    old_level = logger.level
    if logger.getEffectiveLevel() > logging.INFO:
        logger.setLevel(logging.INFO)
    logger.addHandler(handler)
    timer = plane.pause_controllers(limit)
    try:
        yield
    finally:
        timer.cancel()
        plane.resume_controllers()
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


@dataclass
class Harness:
    plugin: KubernetesPlugin
    ctx: Context

    async def background(self) -> None:
        """The start-up hook (connect, learn the pod, check the settings)."""
        await self.plugin.supervisor_background(ctx=self.ctx)

    async def shutdown_started(self, deadline: Deadline, reason: str = "SIGTERM") -> None:
        with deadline.scope():
            await self.plugin.supervisor_shutdown_started(ctx=self.ctx, deadline=deadline, reason=reason)

    async def pre_stop(self, deadline: Deadline) -> float:
        """Run the hook under the deadline as the host does; returns when it
        ended (time.monotonic(), comparable with the scenario's clocks)."""
        with deadline.scope():
            await self.plugin.supervisor_pre_stop(ctx=self.ctx, deadline=deadline)
        return time.monotonic()

    async def after_stop(self, deadline: Deadline, process: str = "controller") -> None:
        info = FakeProcess(process, running=False, status=ExitStatus(code=0))
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
