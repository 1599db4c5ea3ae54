"""This pod, read at SIGTERM: is it being deleted, and when comes the SIGKILL?

The read decides two things for the rest of the shutdown: the deadline (the
kubelet's SIGKILL may come sooner than ``grace_period``), and whether there
is anything to drain (a pod without ``deletionTimestamp`` stays in its
Services).
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from supervisor import Context, Deadline

from ._api import APIError
from ._connection import Connection, Connector
from ._settings import KubernetesSettings

__all__ = ["PodState", "complete_identity", "read_pod_at_sigterm", "seconds_to_kill"]


@dataclass(frozen=True)
class PodState:
    """What the read at SIGTERM found: the pod, or why there is none."""

    pod: Mapping[str, Any] | None = None
    error: str = "the Kubernetes API was not reachable"

    @property
    def meta(self) -> Mapping[str, Any]:
        return (self.pod or {}).get("metadata") or {}

    @property
    def deleting(self) -> bool:
        return bool(self.meta.get("deletionTimestamp"))


async def complete_identity(connection: Connection) -> None:
    """Learn the pod's labels, and its UID and IPs when the environment did
    not give them, from a read of the pod (``APIError`` when it cannot be
    read)."""
    pod = connection.pod
    if not pod.uid or not pod.ips or pod.labels is None:
        found = await connection.api.read_pod(pod.namespace, pod.name)
        connection.pod = pod.completed_from(found)


async def read_pod_at_sigterm(
    ctx: Context, settings: KubernetesSettings, connector: Connector, deadline: Deadline, reason: str
) -> PodState:
    """Read the own Pod and shorten ``deadline`` to its SIGKILL time (less
    ``deadline_margin``) if that is sooner; one timeline step, ``read pod``."""
    with ctx.timeline.step("shutdown_started", "read pod", plugin=ctx.plugin) as step:
        try:
            connection = await connector.connect(settings, ctx.log, deadline)
            pod = await connection.api.read_pod(connection.pod.namespace, connection.pod.name, deadline)
        except APIError as exc:
            step.outcome = "error"
            step.detail = str(exc)
            ctx.log.warning("cannot read this pod: %s", exc)
            return PodState(error=str(exc))
        connection.pod = connection.pod.completed_from(pod)
        state = PodState(pod)
        step.detail = _apply_deletion(ctx, settings, state, deadline, reason)
        return state


def _apply_deletion(
    ctx: Context, settings: KubernetesSettings, state: PodState, deadline: Deadline, reason: str
) -> str:
    """Shorten the deadline as the pod's deletion asks; the timeline detail."""
    if not state.deleting:
        ctx.log.info(
            "pod %s/%s has no deletionTimestamp: it is not being deleted (%s)",
            state.meta.get("namespace"),
            state.meta.get("name"),
            reason,
        )
        return "no deletionTimestamp"
    left = seconds_to_kill(state.meta, deadline)
    if left is None:
        return f"deletionTimestamp {state.meta.get('deletionTimestamp')}"
    target = max(0.0, left - settings.deadline_margin)
    if deadline.shorten(target, "pod deletion deadline"):
        ctx.log.info("pod is being deleted (SIGKILL in about %.1f s): deadline shortened to %.1f s", left, target)
        return f"deadline shortened to {target:.1f}s"
    ctx.log.info("pod is being deleted (SIGKILL in about %.1f s): the grace period ends sooner", left)
    return f"SIGKILL in about {left:.1f}s"


def seconds_to_kill(meta: Mapping[str, Any], deadline: Deadline) -> float | None:
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
