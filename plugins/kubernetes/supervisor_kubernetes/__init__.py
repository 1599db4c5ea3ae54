"""Kubernetes plugin for pid1-supervisor.

Pod-aware shutdown: learn the pod's real SIGKILL time from its
deletionTimestamp, wait until no EndpointSlice routes to the pod before
anything is stopped (instead of ``preStop: sleep 15``), release the leader
Lease the moment its holder process is gone, and record what happened as
Events on the pod.  See README.md for the settings.

In a pod the plugin talks to the API server through a small client of its
own over urllib3; the ``kubernetes`` package is imported only to read a
kubeconfig, for runs outside a cluster.  Either is loaded when the plugin is
enabled, in a worker thread, during normal operation (so that neither the
start nor the shutdown pays for it); the modules imported here use only trio
and the supervisor's API at import time.
"""

from __future__ import annotations

import trio

from supervisor import SKIP, Config, Context, Deadline, ExitStatus, ProcessInfo, Settings, hookimpl

from ._connection import Connector
from ._drain_step import DrainStep, check_services
from ._errors import APIError
from ._lease_step import LeaseStep, time_to_keep
from ._pod import PodState, complete_identity, read_pod_at_sigterm
from ._services import ServiceIndex
from ._settings import KubernetesSettings, parse_settings

__all__ = ["KubernetesPlugin", "KubernetesSettings"]

__version__ = "0.1.0"


class KubernetesPlugin:
    """The plugin; the host makes one instance per supervisor run.

    The hooks only route: each job is its own class (``read_pod_at_sigterm``,
    ``DrainStep``, ``LeaseStep``), and what they share lives here, the
    connection (made once) and what the read at SIGTERM found.  A hook with
    nothing to do returns ``SKIP``, which keeps it out of the timeline:
    ``after_process_stop`` fires for every process, and only one holds the
    Leases.
    """

    def __init__(self) -> None:
        self._connector = Connector()
        self._pod = PodState()
        self._services: ServiceIndex | None = None
        # Set once the background hook has done its start-up work (it may go
        # on following the Services): what a test waits for.
        self.settled = trio.Event()
        self._reads_at_sigterm = (0, 0)

    # -- configuration ---------------------------------------------------------

    @hookimpl
    def supervisor_configure(self, settings: Settings, config: Config) -> KubernetesSettings:
        return parse_settings(settings, config)

    # -- normal operation ----------------------------------------------------

    @hookimpl
    async def supervisor_background(self, ctx: Context) -> None:
        """Load the client and learn the pod's UID, IPs and labels now, while
        there is time, rather than during the shutdown; then follow the
        Services that select the pod until the shutdown cancels this."""
        try:
            await self._start(ctx)
        finally:
            self.settled.set()

    async def _start(self, ctx: Context) -> None:
        settings = _settings(ctx)
        try:
            connection = await self._connector.connect(settings, ctx.log)
            await complete_identity(connection)
        except APIError as exc:
            ctx.log.warning("Kubernetes API not usable yet (will retry at shutdown): %s", exc)
            return
        if settings.drain is None:
            return
        if settings.drain.services:
            await check_services(ctx, connection, settings.drain)
            return
        index = self._services = ServiceIndex(
            connection.api, connection.pod.namespace, dict(connection.pod.labels or ()), ctx.log
        )
        async with trio.open_nursery() as nursery:
            nursery.start_soon(index.follow)
            await index.settled.wait()
            self.settled.set()

    # -- shutdown --------------------------------------------------------------

    @hookimpl
    async def supervisor_shutdown_started(self, ctx: Context, deadline: Deadline, reason: str) -> None:
        """Read the own Pod: is it being deleted, and when comes the SIGKILL?"""
        settings = _settings(ctx)
        if self._connector.connection is not None:
            self._reads_at_sigterm = self._connector.connection.api.client.reads()
        self._pod = await read_pod_at_sigterm(ctx, settings, self._connector, deadline, reason)
        if settings.lease is not None:
            # After the deadline has moved to the pod's: the release comes
            # after the stops, and must not find the drain has used it all.
            deadline.keep_for_later(time_to_keep(deadline))

    @hookimpl
    async def supervisor_pre_stop(self, ctx: Context, deadline: Deadline) -> object:
        """Wait until no EndpointSlice routes to this pod, then for the
        routing to catch up (``endpoint_drain``)."""
        settings = _settings(ctx)
        if settings.drain is None:
            return SKIP
        step = DrainStep(ctx, settings, settings.drain, deadline)
        if self._pod.pod is not None and not self._pod.deleting:
            step.skip()
            return SKIP
        connection = self._connector.connection
        selecting = self._services.names if self._services is not None else None
        await step.run(connection, self._pod, selecting)
        if connection is not None:
            objects, size = connection.api.client.reads()
            ctx.log.debug(
                "read %d objects (%d bytes) from the API server since the shutdown began",
                objects - self._reads_at_sigterm[0],
                size - self._reads_at_sigterm[1],
            )
        return None

    @hookimpl
    async def supervisor_after_process_stop(
        self, ctx: Context, deadline: Deadline, process: ProcessInfo, status: ExitStatus
    ) -> object:
        """Release the Leases the configured process held (``lease_release``)."""
        settings = _settings(ctx)
        if settings.lease is None or process.name != settings.lease.process:
            return SKIP
        await LeaseStep(ctx, settings, settings.lease, deadline).run(self._connector, process, status)
        return None


def _settings(ctx: Context) -> KubernetesSettings:
    settings = ctx.settings
    if not isinstance(settings, KubernetesSettings):
        raise TypeError(f"unexpected settings for the kubernetes plugin: {settings!r}")
    return settings
