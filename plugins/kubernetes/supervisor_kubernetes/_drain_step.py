"""The ``pre_stop`` step: drain the endpoints, say how it went, then wait
what the outcome asks for.

Every outcome takes the same path: one ``endpoint drain`` timeline step, one
log line, one Event, and at most one wait after it (``propagation delay``
once drained, ``fallback delay`` when the slices could not be watched).
What differs between the outcomes is data, in ``_report``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import trio

from supervisor import Context, Deadline

from ._api import APIError
from ._connection import Connection
from ._drain import DrainResult, EndpointDrain, missing_services, slice_selector
from ._events import EventRecorder
from ._pod import PodState
from ._settings import DrainSettings, KubernetesSettings

__all__ = ["DrainStep", "check_services"]

# The drain stops watching this much before the hook's own cancellation (a
# fifth of its budget, at most this), so that a timeout is still logged and
# recorded as one: on a loaded machine the abandoned watch thread and the log
# need a moment.
_REPORT_TIME = 0.5
_REPORT_FRACTION = 0.2
_STARTED = "waiting until no EndpointSlice routes to this pod"


@dataclass(frozen=True)
class _Report:
    """How one outcome is told (log, Event) and what is waited after it."""

    level: int
    message: str
    event: str = ""  # the Event's reason; "" for none
    note: str = ""
    wait: str = ""  # the timeline step of the wait after the drain; "" for none
    until: float = 0.0  # when that wait ends (trio time)


def _report(result: DrainResult, drain: DrainSettings, started: float) -> _Report:
    if result.outcome == "nothing":
        return _Report(logging.INFO, "this pod is in no EndpointSlice: nothing to drain")
    if result.outcome == "fallback":
        return _Report(
            logging.WARNING,
            f"endpoint drain falls back to a fixed {drain.fallback_delay:.1f} s wait: {result.reason}",
            "DrainFallback",
            f"waited a fixed {drain.fallback_delay:g}s: {result.reason}",
            wait="fallback delay",
            until=started + drain.fallback_delay,
        )
    if result.outcome == "timeout":
        return _Report(
            logging.WARNING,
            f"endpoint drain timed out after {result.waited:.1f} s: {result.slices} slices still route to this pod",
            "DrainTimedOut",
            f"{result.slices} EndpointSlices still routed to the pod after {result.waited:.1f}s",
        )
    return _Report(
        logging.INFO,
        f"no EndpointSlice routes to this pod any more ({result.slices} slices, {result.waited:.2f} s); "
        f"waiting {drain.propagation_delay:.1f} s for proxies and load balancers to catch up",
        "DrainFinished",
        f"out of {result.slices} EndpointSlices after {result.waited:.1f}s; "
        f"waiting {drain.propagation_delay:g}s for propagation",
        wait="propagation delay",
        until=trio.current_time() + drain.propagation_delay,
    )


@dataclass(frozen=True)
class DrainStep:
    """One ``pre_stop`` call of an enabled ``endpoint_drain``."""

    ctx: Context
    settings: KubernetesSettings
    drain: DrainSettings
    deadline: Deadline

    def skip(self) -> None:
        """The pod is not being deleted: it stays in its Services."""
        with self.ctx.timeline.step("pre_stop", "endpoint drain", plugin=self.ctx.plugin) as step:
            step.outcome = "skipped"
            step.detail = "no deletionTimestamp"
        self.ctx.log.info(
            "skipping the endpoint drain: the pod has no deletionTimestamp, so it stays in its "
            "Services (a liveness restart, node-pressure eviction or node shutdown)"
        )

    async def run(self, connection: Connection | None, state: PodState) -> None:
        started = trio.current_time()
        events = None
        if connection is not None and self.settings.events:
            events = EventRecorder(connection.api, connection.pod, self.ctx.log)
        async with trio.open_nursery() as nursery:
            with self.ctx.timeline.step("pre_stop", "endpoint drain", plugin=self.ctx.plugin) as step:
                if events is not None:
                    nursery.start_soon(self._record, events, "DrainStarted", _STARTED, False)
                result = await self._drain(connection, state, started)
                step.outcome = {"drained": "ok", "nothing": "skipped"}.get(result.outcome, result.outcome)
                step.detail = result.describe()
            report = _report(result, self.drain, started)
            self.ctx.log.log(report.level, "%s", report.message)
            if events is not None and report.event:
                warning = report.level >= logging.WARNING
                nursery.start_soon(self._record, events, report.event, report.note, warning)
            if report.wait:
                with self.ctx.timeline.step("pre_stop", report.wait, plugin=self.ctx.plugin) as step:
                    step.detail = result.reason
                    await trio.sleep_until(min(report.until, trio.current_time() + self.deadline.remaining_for_hooks()))

    async def _drain(self, connection: Connection | None, state: PodState, started: float) -> DrainResult:
        if connection is None or state.pod is None:
            return DrainResult("fallback", reason=state.error)
        budget = max(0.0, self.deadline.remaining_for_hooks() - self.drain.propagation_delay)
        budget -= self.deadline.slack(_REPORT_TIME, _REPORT_FRACTION, of=budget)
        until = started + min(self.drain.timeout, budget)
        return await EndpointDrain(connection, self.drain, self.deadline, self.ctx.log, until=until).run()

    async def _record(self, events: EventRecorder, reason: str, note: str, warning: bool) -> None:
        await events.record(reason, note, action="Drain", deadline=self.deadline, warning=warning)


async def check_services(ctx: Context, connection: Connection, drain: DrainSettings) -> None:
    """Warn at start about ``endpoint_drain.services`` names that match no
    Service, rather than finding out at SIGTERM that there was nothing to
    wait for.  The drain checks again when it starts."""
    if not drain.services:
        return
    namespace = connection.pod.namespace
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
