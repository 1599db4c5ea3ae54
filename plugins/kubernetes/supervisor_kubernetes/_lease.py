"""``lease_release``: hand a leader Lease over the moment its holder is gone.

Written exactly as client-go's ``ReleaseOnCancel`` writes it (empty holder,
``leaseDurationSeconds: 1``, acquire and renew time now, ``leaseTransitions``
kept, ``strategy``/``preferredHolder`` dropped), with the resourceVersion of a
fresh read, and only when that read shows this pod as the holder.  A 409
means someone wrote in between: read again and decide again, a bounded number
of times.  A standby using client-go semantics takes an empty holder at once.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from supervisor import Deadline

from ._api import APIError, KubeAPI, micro_now
from ._settings import LeaseSettings

__all__ = ["LeaseOutcome", "release_lease", "released"]


@dataclass(frozen=True)
class LeaseOutcome:
    """``released``, ``free`` (nobody holds it), ``other`` (someone else
    does: left alone), ``missing``, ``conflict`` (409s outlasted the retries)
    or ``error``."""

    namespace: str
    name: str
    outcome: str
    holder: str = ""
    detail: str = ""


def released(lease: Mapping[str, Any]) -> dict[str, Any]:
    """The Lease as client-go's release writes it: metadata (with the
    resourceVersion) kept, the spec replaced."""
    spec = lease.get("spec") or {}
    now = micro_now()
    new_spec: dict[str, Any] = {
        "holderIdentity": "",
        "leaseDurationSeconds": 1,
        "acquireTime": now,
        "renewTime": now,
    }
    if spec.get("leaseTransitions") is not None:
        new_spec["leaseTransitions"] = spec["leaseTransitions"]
    body = {key: copy.deepcopy(value) for key, value in lease.items() if key != "spec"}
    body.pop("status", None)
    # managedFields belong to server-side apply; a PUT may omit them.
    (body.get("metadata") or {}).pop("managedFields", None)
    body["spec"] = new_spec
    return body


async def release_lease(
    api: KubeAPI,
    *,
    namespace: str,
    name: str,
    settings: LeaseSettings,
    pod_name: str,
    deadline: Deadline,
    log: logging.Logger,
    first_read: Mapping[str, Any] | None = None,
) -> LeaseOutcome:
    """Release one Lease if (and only while) this pod holds it."""
    lease = first_read
    for attempt in range(settings.retries + 1):
        try:
            if lease is None:
                lease = await api.read_lease(namespace, name, deadline)
        except APIError as exc:
            if exc.status == 404:
                return LeaseOutcome(namespace, name, "missing", detail=str(exc))
            return LeaseOutcome(namespace, name, "error", detail=str(exc))
        holder = str((lease.get("spec") or {}).get("holderIdentity") or "")
        if not holder:
            return LeaseOutcome(namespace, name, "free")
        if not settings.holds(holder, pod_name):
            return LeaseOutcome(namespace, name, "other", holder=holder)
        try:
            await api.replace_lease(namespace, name, released(lease), deadline)
        except APIError as exc:
            if exc.status != 409:
                return LeaseOutcome(namespace, name, "error", holder=holder, detail=str(exc))
            log.info(
                "lease %s/%s changed while releasing it (409 Conflict, attempt %d of %d): reading it again",
                namespace,
                name,
                attempt + 1,
                settings.retries + 1,
            )
            lease = None
            continue
        return LeaseOutcome(namespace, name, "released", holder=holder)
    return LeaseOutcome(
        namespace,
        name,
        "conflict",
        detail=f"still conflicting after {settings.retries + 1} attempts",
    )
