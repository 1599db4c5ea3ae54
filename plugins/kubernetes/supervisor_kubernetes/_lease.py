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

__all__ = ["LeaseOutcome", "LeaseReleaser", "LeaseTarget", "released"]


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


@dataclass(frozen=True)
class LeaseTarget:
    """One Lease to release; ``first_read`` is the object a list already
    returned (its resourceVersion saves a read), if any."""

    namespace: str
    name: str
    first_read: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class LeaseReleaser:
    """Releases Leases this pod (``pod_name``) holds, one call each."""

    api: KubeAPI
    settings: LeaseSettings
    pod_name: str
    deadline: Deadline
    log: logging.Logger

    async def release(self, target: LeaseTarget) -> LeaseOutcome:
        """Release ``target`` if (and only while) this pod holds it: read,
        decide, write; after a 409, read and decide again."""
        lease = target.first_read
        attempts = self.settings.retries + 1
        for attempt in range(1, attempts + 1):
            if lease is None:
                read = await self._read(target)
                if isinstance(read, LeaseOutcome):
                    return read
                lease = read
            outcome = self._not_ours(target, lease) or await self._write(target, lease, attempt)
            if outcome is not None:
                return outcome
            lease = None  # a 409: someone wrote in between
        return LeaseOutcome(
            target.namespace, target.name, "conflict", detail=f"still conflicting after {attempts} attempts"
        )

    async def _read(self, target: LeaseTarget) -> Mapping[str, Any] | LeaseOutcome:
        try:
            return await self.api.read_lease(target.namespace, target.name, self.deadline)
        except APIError as exc:
            outcome = "missing" if exc.status == 404 else "error"
            return LeaseOutcome(target.namespace, target.name, outcome, detail=str(exc))

    def _not_ours(self, target: LeaseTarget, lease: Mapping[str, Any]) -> LeaseOutcome | None:
        """The outcome if the Lease is not this pod's to release, else None."""
        holder = _holder(lease)
        if not holder:
            return LeaseOutcome(target.namespace, target.name, "free")
        if not self.settings.holds(holder, self.pod_name):
            return LeaseOutcome(target.namespace, target.name, "other", holder=holder)
        return None

    async def _write(self, target: LeaseTarget, lease: Mapping[str, Any], attempt: int) -> LeaseOutcome | None:
        """Write the release; None when a 409 says to read again."""
        holder = _holder(lease)
        try:
            await self.api.replace_lease(target.namespace, target.name, released(lease), self.deadline)
        except APIError as exc:
            if exc.status != 409:
                return LeaseOutcome(target.namespace, target.name, "error", holder=holder, detail=str(exc))
            self.log.info(
                "lease %s/%s changed while releasing it (409 Conflict, attempt %d of %d): reading it again",
                target.namespace,
                target.name,
                attempt,
                self.settings.retries + 1,
            )
            return None
        return LeaseOutcome(target.namespace, target.name, "released", holder=holder)


def _holder(lease: Mapping[str, Any]) -> str:
    return str((lease.get("spec") or {}).get("holderIdentity") or "")
