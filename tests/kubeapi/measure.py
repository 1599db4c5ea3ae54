"""Figures for the benchmark suite: the plugin's drain latency and Lease
hand-over time, measured against the test API server.

    from tests.kubeapi.measure import drain_latency, lease_handover
    drain_latency(services=20, endpoints=5000, runs=5)   # seconds after the last flip
    lease_handover(runs=5, retry_period=2.0)              # seconds until the standby leads

Both run the plugin's real hooks in ``trio.run`` with a real Deadline and
Timeline, over HTTPS, exactly as the supervisor would call them.
"""

from __future__ import annotations

import importlib
import logging
import os
import tempfile
import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import trio

from supervisor import Config, Context, Deadline, ExitStatus, ProcessSpec, Settings, Timeline

from ._leader import client_from
from ._scenarios import Cluster, other_endpoints, pod_endpoints
from ._server import KubeAPIServer

__all__ = ["drain_latency", "lease_handover"]


@dataclass
class _Process:
    """The ``process`` argument of after_process_stop: exited."""

    name: str
    spec: ProcessSpec
    pid: int | None = None
    running: bool = False
    status: ExitStatus | None = None
    restarts: int = 0


@contextmanager
def _namespace() -> Iterator[tuple[KubeAPIServer, Cluster, Path]]:
    namespace = f"bench-{uuid.uuid4().hex[:6]}"
    with tempfile.TemporaryDirectory() as tmp, KubeAPIServer(namespace=namespace) as server:
        account = server.write_service_account(Path(tmp) / "serviceaccount")
        saved = {k: os.environ.get(k) for k in server.incluster_env()}
        os.environ.update(server.incluster_env())
        cluster = Cluster(client_from(service_account_dir=str(account)), namespace)
        try:
            yield server, cluster, account
        finally:
            cluster.cleanup()
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value


def _plugin(section: Mapping[str, object]) -> tuple[Any, Config, object]:
    # Imported by name: the suite (and mypy) may run without the plugin installed.
    plugin_module = importlib.import_module("supervisor_kubernetes")

    spec = ProcessSpec(name="controller", command=("true",), main=True)
    config = Config(processes=(spec,))
    plugin = plugin_module.KubernetesPlugin()
    settings = Settings.from_mapping(dict(section), path="plugins.kubernetes")
    parsed = plugin.supervisor_configure(settings=settings, config=config)
    if settings.problems:
        raise ValueError("; ".join(str(p) for p in settings.problems))
    return plugin, config, parsed


def _context(config: Config, parsed: object) -> Context:
    return Context(
        plugin="kubernetes",
        settings=parsed,
        config=config,
        log=logging.getLogger("supervisor.plugin.kubernetes"),
        processes={},
        timeline=Timeline(),
        main_exited=trio.Event(),
    )


async def _shutdown_until_drained(plugin: Any, config: Config, parsed: object) -> float:
    ctx = _context(config, parsed)
    deadline = Deadline(30)
    await plugin.supervisor_shutdown_started(ctx=ctx, deadline=deadline, reason="SIGTERM")
    await plugin.supervisor_pre_stop(ctx=ctx, deadline=deadline)
    return time.monotonic()


async def _after_controller_exit(plugin: Any, config: Config, parsed: object) -> None:
    ctx = _context(config, parsed)
    process = _Process("controller", config.processes[0], status=ExitStatus(code=0))
    await plugin.supervisor_after_process_stop(ctx=ctx, deadline=Deadline(10), process=process, status=process.status)


def drain_latency(*, services: int = 20, endpoints: int = 5000, runs: int = 5) -> list[float]:
    """Seconds from the last endpoint flip to the end of the drain, per run,
    with ``endpoints`` endpoints over ``services`` Services in the namespace."""
    samples = []
    for _ in range(runs):
        with _namespace() as (_, cluster, account):
            pod = cluster.create_pod("web-0", ip="10.0.0.7")
            others = other_endpoints(endpoints - services)
            share = len(others) // services
            for index in range(services):
                chunk = others[index * share : (index + 1) * share]
                cluster.create_service(f"svc-{index:02d}", [pod_endpoints(pod, "10.0.0.7"), *chunk])
            plugin, config, parsed = _plugin(
                {
                    "service_account_dir": str(account),
                    "pod": {"name": "web-0", "namespace": cluster.namespace},
                    "endpoint_drain": {"propagation_delay": 0, "fallback_delay": 30},
                }
            )
            deletion = cluster.delete_pod_and_flip("web-0", flip_after=1.0)

            ended = trio.run(_shutdown_until_drained, plugin, config, parsed)
            samples.append(ended - deletion.wait_flipped())
    return samples


def lease_handover(*, runs: int = 5, retry_period: float = 2.0) -> list[float]:
    """Seconds from the holder's exit to a standby (client-go semantics,
    ``retry_period``) leading, with the plugin releasing the Lease."""
    samples = []
    for _ in range(runs):
        with _namespace() as (_, cluster, account):
            cluster.create_pod("ctrl-0")
            leader = cluster.elector("leader", "ctrl-0_1", retry_period=retry_period).start()
            leader.wait_until_leading(retry_period * 3)
            standby = cluster.elector("leader", "ctrl-1_1", retry_period=retry_period).start()
            plugin, config, parsed = _plugin(
                {
                    "service_account_dir": str(account),
                    "pod": {"name": "ctrl-0", "namespace": cluster.namespace},
                    "lease_release": {"process": "controller", "leases": [{"name": "leader"}]},
                }
            )
            leader.stop()
            exited = time.monotonic()

            trio.run(_after_controller_exit, plugin, config, parsed)
            end = time.monotonic() + retry_period * 3 + 5
            while standby.acquired_at is None and time.monotonic() < end:
                time.sleep(0.005)
            if standby.acquired_at is None:
                raise RuntimeError("the standby never acquired the released Lease")
            samples.append(standby.acquired_at - exited)
    return samples
