"""Kubernetes plugin for pid1-supervisor.

Pod-aware shutdown: learn the pod's real SIGKILL time from its
deletionTimestamp, wait until no EndpointSlice routes to the pod before
anything is stopped (instead of ``preStop: sleep 15``), release the leader
Lease the moment its holder process is gone, and record what happened as
Events on the pod.  See README.md for the settings.

The ``kubernetes`` client is imported only when the plugin is enabled, in a
worker thread, during normal operation (so that neither the start nor the
shutdown pays for it); the modules imported here use only trio and the
supervisor's API at import time.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Any

import trio

from supervisor import Config, Context, Deadline, ExitStatus, ProcessInfo, Settings, hookimpl

from ._api import APIError, KubeAPI, load_client
from ._drain import DrainResult, drain_endpoints, missing_services, slice_selector
from ._events import EventRecorder
from ._identity import PodIdentity, identity_from_environment
from ._lease import release_lease
from ._settings import KubernetesSettings, parse_settings

__all__ = ["KubernetesPlugin", "KubernetesSettings"]

__version__ = "0.1.0"

_REPORT_TIME = 0.5


@dataclass
class _Connection:
    """The client and this pod, once known."""

    api: KubeAPI
    pod_identity: PodIdentity


class KubernetesPlugin:
    """The plugin; the host makes one instance per supervisor run."""

    def __init__(self) -> None:
        self._lock = trio.Lock()
        self._connection: _Connection | None = None
        self._pod: dict[str, Any] | None = None
        self._pod_error: str | None = None

    # -- configuration ---------------------------------------------------------

    @hookimpl
    def supervisor_configure(self, settings: Settings, config: Config) -> KubernetesSettings:
        return parse_settings(settings, config)

    # -- normal operation ----------------------------------------------------

    @hookimpl
    async def supervisor_background(self, ctx: Context) -> None:
        """Import the client, load the configuration and learn the pod's UID
        and IPs now, while there is time, rather than during the shutdown."""
        try:
            connection = await self._connect(ctx)
            identity = connection.pod_identity
            if not identity.uid or not identity.ips:
                pod = await connection.api.read_pod(identity.namespace, identity.name)
                connection.pod_identity = identity.completed_from(pod)
        except APIError as exc:
            ctx.log.warning("Kubernetes API not usable yet (will retry at shutdown): %s", exc)
            return
        await _check_services(ctx, connection)

    # -- shutdown --------------------------------------------------------------

    @hookimpl
    async def supervisor_shutdown_started(self, ctx: Context, deadline: Deadline, reason: str) -> None:
        """Read the own Pod: is it being deleted, and when comes the SIGKILL?"""
        settings = _settings(ctx)
        with ctx.timeline.step("shutdown_started", "read pod", plugin=ctx.plugin) as step:
            try:
                connection = await self._connect(ctx, deadline)
                identity = connection.pod_identity
                self._pod = await connection.api.read_pod(identity.namespace, identity.name, deadline)
            except APIError as exc:
                self._pod_error = str(exc)
                step.outcome = "error"
                step.detail = self._pod_error
                ctx.log.warning("cannot read this pod: %s", exc)
                return
            connection.pod_identity = identity.completed_from(self._pod)
            meta = self._pod.get("metadata") or {}
            deleting = meta.get("deletionTimestamp")
            if not deleting:
                step.detail = "no deletionTimestamp"
                ctx.log.info(
                    "pod %s/%s has no deletionTimestamp: it is not being deleted (%s)",
                    identity.namespace,
                    identity.name,
                    reason,
                )
                return
            left = _seconds_to_kill(meta, deadline)
            if left is None:
                step.detail = f"deletionTimestamp {deleting}"
                return
            target = max(0.0, left - settings.deadline_margin)
            if deadline.shorten(target, "pod deletion deadline"):
                step.detail = f"deadline shortened to {target:.1f}s"
                ctx.log.info(
                    "pod is being deleted (SIGKILL in about %.1f s): deadline shortened to %.1f s",
                    left,
                    target,
                )
            else:
                step.detail = f"SIGKILL in about {left:.1f}s"
                ctx.log.info(
                    "pod is being deleted (SIGKILL in about %.1f s): the grace period ends sooner",
                    left,
                )

    @hookimpl
    async def supervisor_pre_stop(self, ctx: Context, deadline: Deadline) -> None:
        """Wait until no EndpointSlice routes to this pod, then for the
        routing to catch up (``endpoint_drain``)."""
        settings = _settings(ctx)
        if settings.drain is None:
            return

        drain = settings.drain
        started = trio.current_time()
        connection = self._connection
        if connection is None or self._pod is None:
            why = self._pod_error or "the Kubernetes API was not reachable"
            await _fixed_wait(ctx, deadline, drain.fallback_delay, started, why)
            return
        identity = connection.pod_identity
        if not (self._pod.get("metadata") or {}).get("deletionTimestamp"):
            with ctx.timeline.step("pre_stop", "endpoint drain", plugin=ctx.plugin) as step:
                step.outcome = "skipped"
                step.detail = "no deletionTimestamp"
            ctx.log.info(
                "skipping the endpoint drain: the pod has no deletionTimestamp, so it stays in its "
                "Services (a liveness restart, node-pressure eviction or node shutdown)"
            )
            return
        events = EventRecorder(connection.api if settings.events else None, identity, ctx.log)
        budget = max(0.0, deadline.remaining_for_hooks() - drain.propagation_delay)
        # Stop watching a little before the hook's own cancellation, so that
        # a timeout is still logged and recorded as one (on a loaded machine
        # the abandoned watch thread and the log need a moment).
        budget -= min(_REPORT_TIME, budget * 0.2)
        until = started + min(drain.timeout, budget)
        async with trio.open_nursery() as nursery:
            with ctx.timeline.step("pre_stop", "endpoint drain", plugin=ctx.plugin) as step:
                nursery.start_soon(
                    lambda: events.record(
                        "DrainStarted",
                        "waiting until no EndpointSlice routes to this pod",
                        action="Drain",
                        deadline=deadline,
                    )
                )
                result = await drain_endpoints(connection.api, identity, drain, deadline, ctx.log, until=until)
                step.outcome = {"drained": "ok", "nothing": "skipped"}.get(result.outcome, result.outcome)
                step.detail = _describe(result)
            if result.outcome == "nothing":
                ctx.log.info("this pod is in no EndpointSlice: nothing to drain")
            elif result.outcome == "fallback":
                nursery.start_soon(
                    lambda: events.record(
                        "DrainFallback",
                        f"waited a fixed {drain.fallback_delay:g}s: {result.reason}",
                        action="Drain",
                        deadline=deadline,
                        warning=True,
                    )
                )
                await _fixed_wait(ctx, deadline, drain.fallback_delay, started, result.reason)
            elif result.outcome == "timeout":
                ctx.log.warning(
                    "endpoint drain timed out after %.1f s: %d slices still route to this pod",
                    result.waited,
                    result.slices,
                )
                nursery.start_soon(
                    lambda: events.record(
                        "DrainTimedOut",
                        f"{result.slices} EndpointSlices still routed to the pod after {result.waited:.1f}s",
                        action="Drain",
                        deadline=deadline,
                        warning=True,
                    )
                )
            else:
                ctx.log.info(
                    "no EndpointSlice routes to this pod any more (%d slices, %.2f s); "
                    "waiting %.1f s for proxies and load balancers to catch up",
                    result.slices,
                    result.waited,
                    drain.propagation_delay,
                )
                nursery.start_soon(
                    lambda: events.record(
                        "DrainFinished",
                        f"out of {result.slices} EndpointSlices after {result.waited:.1f}s; "
                        f"waiting {drain.propagation_delay:g}s for propagation",
                        action="Drain",
                        deadline=deadline,
                    )
                )
                with ctx.timeline.step("pre_stop", "propagation delay", plugin=ctx.plugin):
                    await trio.sleep(min(drain.propagation_delay, deadline.remaining_for_hooks()))

    @hookimpl
    async def supervisor_after_process_stop(
        self, ctx: Context, deadline: Deadline, process: ProcessInfo, status: ExitStatus
    ) -> None:
        """Release the Leases the configured process held (``lease_release``)."""
        settings = _settings(ctx)
        lease = settings.lease
        if lease is None or process.name != lease.process:
            return

        if process.running:
            # Two leaders at once is worse than a slow hand-over.
            ctx.log.warning("%s is still running: its Leases are not released", process.name)
            return
        try:
            connection = await self._connect(ctx, deadline)
        except APIError as exc:
            ctx.log.warning("cannot release the Leases of %s: %s", process.name, exc)
            return
        identity = connection.pod_identity
        namespace = lease.selector_namespace or identity.namespace
        targets: list[tuple[str, str, dict[str, Any] | None]] = [
            (ref.namespace or identity.namespace, ref.name, None) for ref in lease.leases
        ]
        if lease.selector is not None:
            try:
                found = await connection.api.list_leases(namespace, lease.selector, deadline)
            except APIError as exc:
                ctx.log.warning("cannot list Leases %r in %s: %s", lease.selector, namespace, exc)
                return
            targets += [(namespace, str(item["metadata"]["name"]), item) for item in found]
        events = EventRecorder(connection.api if settings.events else None, identity, ctx.log)

        async def one(ns: str, name: str, first: dict[str, Any] | None) -> None:
            with ctx.timeline.step("after_process_stop", f"release lease {ns}/{name}", plugin=ctx.plugin) as step:
                result = await release_lease(
                    connection.api,
                    namespace=ns,
                    name=name,
                    settings=lease,
                    pod_name=identity.name,
                    deadline=deadline,
                    log=ctx.log,
                    first_read=first,
                )
                step.outcome = {"released": "ok", "free": "skipped", "other": "skipped"}.get(
                    result.outcome, result.outcome
                )
                step.detail = (result.holder and f"holder {result.holder}") or result.detail
            if result.outcome == "released":
                ctx.log.info("released lease %s/%s held by %s (%s)", ns, name, result.holder, status)
                await events.record(
                    "LeaseReleased",
                    f"released Lease {ns}/{name} held by {result.holder} after {process.name} {status}",
                    action="ReleaseLease",
                    deadline=deadline,
                )
            elif result.outcome == "free":
                ctx.log.info("lease %s/%s is already free", ns, name)
            elif result.outcome == "other":
                ctx.log.info(
                    "lease %s/%s is held by %s, not by this pod: left alone",
                    ns,
                    name,
                    result.holder,
                )
            elif result.outcome == "missing":
                ctx.log.info("lease %s/%s does not exist", ns, name)
            else:
                ctx.log.warning("could not release lease %s/%s: %s", ns, name, result.detail)

        async with trio.open_nursery() as nursery:
            for ns, name, first in targets:
                nursery.start_soon(one, ns, name, first)

    # -- internals -----------------------------------------------------------

    async def _connect(self, ctx: Context, deadline: Deadline | None = None) -> _Connection:

        settings = _settings(ctx)
        async with self._lock:
            if self._connection is not None:
                return self._connection
            limit = deadline.remaining_for_hooks() if deadline is not None else None
            with trio.move_on_after(limit if limit is not None else float("inf")) as scope:
                api_client, namespace = await trio.to_thread.run_sync(load_client, settings, abandon_on_cancel=True)
            if scope.cancelled_caught:
                raise APIError("no time left to load the Kubernetes client")
            identity = identity_from_environment(
                settings.pod, settings.service_account_dir, kubeconfig_namespace=namespace
            )
            self._connection = _Connection(KubeAPI(api_client, request_timeout=settings.request_timeout), identity)
            ctx.log.debug("connected as pod %s/%s", identity.namespace, identity.name)
            return self._connection


async def _check_services(ctx: Context, connection: _Connection) -> None:
    """Warn at start about ``endpoint_drain.services`` names that match no
    Service, rather than finding out at SIGTERM that there was nothing to
    wait for.  The drain checks again when it starts."""
    drain = _settings(ctx).drain
    if drain is None or not drain.services:
        return
    namespace = connection.pod_identity.namespace
    try:
        items, _ = await connection.api.list_endpoint_slices(namespace, slice_selector(drain.services))
    except APIError as exc:
        ctx.log.warning("cannot list the EndpointSlices of namespace %s: %s", namespace, exc)
        return
    for service in missing_services(drain.services, items):
        ctx.log.warning(
            "endpoint_drain.services names %r, but no EndpointSlice belongs to a Service of that name "
            "in namespace %s (is the name right?)",
            service,
            namespace,
        )


def _settings(ctx: Context) -> KubernetesSettings:
    settings = ctx.settings
    if not isinstance(settings, KubernetesSettings):
        raise TypeError(f"unexpected settings for the kubernetes plugin: {settings!r}")
    return settings


def _seconds_to_kill(meta: dict[str, Any], deadline: Deadline) -> float | None:
    """Seconds until the kubelet's SIGKILL, from the deletion fields.

    deletionTimestamp is the wall-clock SIGKILL time; deletionGracePeriodSeconds
    counted from the SIGTERM (when this shutdown started) does not depend on
    the node's clock agreeing with the API server's.  The sooner wins, unless
    the timestamp is implausible (a clock far off).
    """
    candidates = []
    grace = meta.get("deletionGracePeriodSeconds")
    if isinstance(grace, int | float):
        candidates.append(float(grace) - deadline.elapsed())
    try:
        stamp = datetime.datetime.fromisoformat(str(meta.get("deletionTimestamp")))
    except ValueError:
        stamp = None
    if stamp is not None:
        by_clock = (stamp - datetime.datetime.now(datetime.UTC)).total_seconds()
        if by_clock >= 0 and (not candidates or by_clock <= candidates[0] + 5):
            # The server computes now + grace but serializes deletionTimestamp
            # in whole seconds, dropping the fraction: the real moment lies in
            # [stamp, stamp + 1 s).  A grace count inside that second agrees
            # with the stamp and is the exact one (counted from the SIGTERM);
            # otherwise the stamp, the safe end, is kept and up to 1 s of it
            # goes to the margin.
            if candidates and by_clock <= candidates[0] < by_clock + 1:
                return candidates[0]
            candidates.append(by_clock)
    return min(candidates) if candidates else None


async def _fixed_wait(ctx: Context, deadline: Deadline, delay: float, started: float, why: str) -> None:
    """The fall-back when the slices cannot be watched: the classic sleep."""
    left = max(0.0, started + delay - trio.current_time())
    wait = min(left, deadline.remaining_for_hooks())
    ctx.log.warning("endpoint drain falls back to a fixed %.1f s wait: %s", delay, why)
    with ctx.timeline.step("pre_stop", "fallback delay", plugin=ctx.plugin) as step:
        step.detail = why
        await trio.sleep(wait)


def _describe(result: DrainResult) -> str:
    if result.outcome == "nothing":
        return "in no EndpointSlice"
    if result.outcome == "fallback":
        return str(result.reason)
    if result.outcome == "timeout":
        return f"{result.slices} slices still routing"
    return f"{result.slices} slices"
