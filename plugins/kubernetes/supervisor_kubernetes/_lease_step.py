"""The ``after_process_stop`` step of ``lease_release``: find the Leases,
release each one at once (concurrently), and say how each went.

Every outcome of one Lease takes the same path: a timeline step, one log
line, and an Event for a release; what differs is data, in ``_TOLD``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

import trio

from supervisor import Context, Deadline, ExitStatus, ProcessInfo

from ._api import APIError
from ._connection import Connection, Connector
from ._events import EventRecorder
from ._lease import LeaseOutcome, LeaseReleaser, LeaseTarget
from ._settings import KubernetesSettings, LeaseSettings

__all__ = ["LeaseStep", "time_to_keep"]

# What a release needs after its holder has exited (a read, a write, an
# Event; ~10 ms each on a healthy server): kept back from the drain and the
# fixed delays before the stops, at most this, a fifth of the hooks' time.
_KEEP_MAX = 1.0
_KEEP_FRACTION = 0.2


def time_to_keep(deadline: Deadline) -> float:
    """The seconds to keep for the release, from what hooks have left now."""
    return deadline.slack(_KEEP_MAX, _KEEP_FRACTION)


@dataclass(frozen=True)
class _Told:
    level: int
    message: str  # str.format()ted with the outcome's fields and ``why`` ("controller exited 0")
    step: str  # the timeline outcome


_TOLD: Mapping[str, _Told] = {
    "released": _Told(logging.INFO, "released lease {namespace}/{name} held by {holder} after {why}", "ok"),
    "free": _Told(logging.INFO, "lease {namespace}/{name} is already free", "skipped"),
    "other": _Told(
        logging.INFO, "lease {namespace}/{name} is held by {holder}, not by this pod: left alone", "skipped"
    ),
    "missing": _Told(logging.INFO, "lease {namespace}/{name} does not exist", "missing"),
}
# "error" and "conflict": a warning, with what went wrong.
_FAILED = "could not release lease {namespace}/{name}: {detail}"


@dataclass(frozen=True)
class LeaseStep:
    """One ``after_process_stop`` call for the configured process, once it
    has exited."""

    ctx: Context
    settings: KubernetesSettings
    lease: LeaseSettings
    deadline: Deadline

    async def run(self, connector: Connector, process: ProcessInfo, status: ExitStatus) -> None:
        if process.running:
            # Two leaders at once is worse than a slow hand-over.
            self.ctx.log.warning("%s is still running: its Leases are not released", process.name)
            return
        told: set[str] = set()  # what has been reported (as "namespace/name")
        try:
            await self._run(connector, process, status, told)
        finally:
            # Cancelled by the deadline before an answer came: say so rather
            # than leave the standby's owner to wonder why it waited a whole
            # lease duration.  No Event: there is no time left to write one.
            for what in self._expected(connector) - told:
                self.ctx.log.warning(
                    "cannot release %s: no time left before the shutdown deadline "
                    "(the standby takes over when it expires)",
                    what,
                )

    def _expected(self, connector: Connector) -> set[str]:
        """What a release reports on: each named Lease, and the selector."""
        connection = connector.connection
        own = connection.pod.namespace if connection is not None else self.settings.pod.namespace or "-"
        expected = {f"lease {ref.namespace or own}/{ref.name}" for ref in self.lease.leases}
        if self.lease.selector is not None:
            expected.add(f"the Leases matching {self.lease.selector!r}")
        return expected

    async def _run(self, connector: Connector, process: ProcessInfo, status: ExitStatus, told: set[str]) -> None:
        connection = connector.connection
        try:
            connection = await connector.connect(self.settings, self.ctx.log, self.deadline)
            targets = await self._targets(connection)
        except APIError as exc:
            told |= self._expected(connector)
            await self._not_released(connection, f"the Leases of {process.name}", str(exc))
            return
        if self.lease.selector is not None:
            told.add(f"the Leases matching {self.lease.selector!r}")
        releaser = LeaseReleaser(connection.api, self.lease, connection.pod.name, self.deadline, self.ctx.log)
        events = self._events(connection)
        async with trio.open_nursery() as nursery:
            for target in targets:
                nursery.start_soon(self._release, releaser, target, events, f"{process.name} {status}", told)

    def _events(self, connection: Connection | None) -> EventRecorder | None:
        if connection is None or not self.settings.events:
            return None
        return EventRecorder(connection.api, connection.pod, self.ctx.log)

    async def _not_released(self, connection: Connection | None, what: str, why: str) -> None:
        """One warning and one Warning Event for a release that cannot happen."""
        self.ctx.log.warning("cannot release %s: %s", what, why)
        events = self._events(connection)
        if events is not None:
            await events.record(
                "LeaseNotReleased",
                f"could not release {what}: {why}",
                action="ReleaseLease",
                deadline=self.deadline,
                warning=True,
            )

    async def _targets(self, connection: Connection) -> list[LeaseTarget]:
        """The named Leases, and those the selector finds (``APIError`` if
        the list fails)."""
        own = connection.pod.namespace
        targets = [LeaseTarget(ref.namespace or own, ref.name) for ref in self.lease.leases]
        if self.lease.selector is not None:
            namespace = self.lease.selector_namespace or own
            try:
                found = await connection.api.list_leases(namespace, self.lease.selector, self.deadline)
            except APIError as exc:
                raise APIError(f"cannot list Leases {self.lease.selector!r} in {namespace}: {exc}", exc.status) from exc
            targets += [LeaseTarget(namespace, str(item["metadata"]["name"]), item) for item in found]
        return targets

    async def _release(
        self,
        releaser: LeaseReleaser,
        target: LeaseTarget,
        events: EventRecorder | None,
        why: str,
        reported: set[str],
    ) -> None:
        name = f"release lease {target.namespace}/{target.name}"
        with self.ctx.timeline.step("after_process_stop", name, plugin=self.ctx.plugin) as step:
            result = await releaser.release(target)
            reported.add(f"lease {target.namespace}/{target.name}")
            told = _TOLD.get(result.outcome) or _Told(logging.WARNING, _FAILED, result.outcome)
            step.outcome = told.step
            step.detail = (result.holder and f"holder {result.holder}") or result.detail
        self.ctx.log.log(told.level, "%s", told.message.format(**_fields(result), why=why))
        if events is None:
            return
        if result.outcome == "released":
            await events.record(
                "LeaseReleased",
                f"released Lease {target.namespace}/{target.name} held by {result.holder} after {why}",
                action="ReleaseLease",
                deadline=self.deadline,
            )
        elif told.level >= logging.WARNING:
            await events.record(
                "LeaseNotReleased",
                _FAILED.format(**_fields(result)).replace("lease", "Lease", 1),
                action="ReleaseLease",
                deadline=self.deadline,
                warning=True,
            )


def _fields(result: LeaseOutcome) -> dict[str, str]:
    return {"namespace": result.namespace, "name": result.name, "holder": result.holder, "detail": result.detail}
