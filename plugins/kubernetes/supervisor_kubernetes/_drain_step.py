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

from supervisor import Context, Deadline, Step

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
# Less time than this for the list and the watch is no time to look.
_MIN_LOOK = 0.1
# A wait cut by the deadline ends this much (a fiftieth of what hooks have
# left, at most) before the hook would be cancelled.
_WAIT_SLACK_MAX = 0.05
_WAIT_SLACK_FRACTION = 0.02


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
        return _Report(logging.INFO, f"{result.reason or 'this pod is in no EndpointSlice'}: nothing to drain")
    if result.outcome == "no time":
        # Not looking costs nothing the pod can use; what is left still
        # gives the proxies a moment with the endpoint flipped at deletion.
        return _Report(
            logging.WARNING,
            f"endpoint drain did not look at the EndpointSlices: {result.reason}; waiting what is left",
            "DrainNotStarted",
            f"no time to look: {result.reason}",
            wait="propagation delay",
            until=trio.current_time() + drain.propagation_delay,
        )
    if result.outcome == "fallback":
        return _Report(
            logging.WARNING,
            f"endpoint drain falls back to a fixed {drain.fallback_delay:.1f} s wait: {result.reason}",
            "DrainFallback",
            f"waited a fixed {drain.fallback_delay:g}s: {result.reason}",
            wait="fallback delay",
            until=started + drain.fallback_delay,
        )
    if result.outcome == "timeout" and not result.looked:
        return _Report(
            logging.WARNING,
            f"endpoint drain timed out after {result.waited:.1f} s before the EndpointSlices were listed: "
            "whether they still route to this pod is unknown",
            "DrainTimedOut",
            f"the EndpointSlices were not listed within {result.waited:.1f}s",
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


def _serving(result: DrainResult, drain: DrainSettings, deadline: Deadline, after: _Report) -> _Report | None:
    """When the drain is over but the pod still gets traffic (or may: the
    slices were never listed), keep the processes serving until the latest
    moment that leaves the stops (``stop_timeout``) and the steps after them
    (a Lease release) inside the deadline: stopping sooner only turns the
    traffic that still comes into errors.  None when that does not apply."""
    if not drain.keep_serving or result.outcome not in ("timeout", "drained"):
        return None
    why = result.routed or ([] if result.looked else ["the EndpointSlices were never listed"])
    if not why:
        return None
    now = trio.current_time()
    until = max(after.until, now + deadline.remaining_for_hooks() - deadline.stop_time)
    serve = until - now
    if serve <= 0:
        return None
    text = "; ".join(why)
    return _Report(
        logging.WARNING,
        f"the pod still gets traffic ({text}): its processes keep serving for {serve:.1f} s more, "
        "until the stops need the rest of the deadline",
        "ServingUntilStop",
        f"{text}; processes keep serving for {serve:.1f}s more",
        wait="serving until the stops",
        until=until,
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

    async def run(self, connection: Connection | None, state: PodState, selecting: list[str] | None = None) -> None:
        """``selecting``: the Services that select this pod, when known
        (their slices are all the drain reads)."""
        started = trio.current_time()
        events = None
        if connection is not None and self.settings.events:
            events = EventRecorder(connection.api, connection.pod, self.ctx.log)
        async with trio.open_nursery() as nursery:
            with self.ctx.timeline.step("pre_stop", "endpoint drain", plugin=self.ctx.plugin) as step:
                if events is not None:
                    nursery.start_soon(self._record, events, "DrainStarted", _STARTED, False)
                result = await self._drain(connection, state, started, selecting)
                step.outcome = {"drained": "ok", "nothing": "skipped", "no time": "skipped"}.get(
                    result.outcome, result.outcome
                )
                step.detail = result.describe()
            report = _report(result, self.drain, started)
            serving = _serving(result, self.drain, self.deadline, report)
            for told in (report, serving):
                if told is None:
                    continue
                self.ctx.log.log(told.level, "%s", told.message)
                if events is not None and told.event:
                    nursery.start_soon(self._record, events, told.event, told.note, told.level >= logging.WARNING)
            wait = serving or report
            if wait.wait:
                with self.ctx.timeline.step("pre_stop", wait.wait, plugin=self.ctx.plugin) as step:
                    await self._wait(step, wait.until, result.reason)

    async def _drain(
        self, connection: Connection | None, state: PodState, started: float, selecting: list[str] | None
    ) -> DrainResult:
        if connection is None or state.pod is None:
            return DrainResult("fallback", reason=state.error, looked=False)
        services = list(self.drain.services) or selecting or []
        if not self.drain.services and selecting == []:
            return DrainResult("nothing", reason="no Service selects this pod")
        left = self.deadline.remaining_for_hooks()
        budget = left - self.drain.propagation_delay
        budget -= self.deadline.slack(_REPORT_TIME, _REPORT_FRACTION, of=budget)
        if budget < _MIN_LOOK:
            return DrainResult("no time", reason=_no_time(state, left, self.drain), looked=False)
        until = started + min(self.drain.timeout, budget)
        drain = EndpointDrain(connection, self.drain, self.deadline, self.ctx.log, until=until, services=services)
        return await drain.run()

    async def _wait(self, step: Step, until: float, detail: str) -> None:
        """Wait until ``until``, or end a hair before the hook's own time is
        up, so that a wait the deadline cuts ends as itself, saying so,
        rather than as a hook cut short."""
        now = trio.current_time()
        end = now + self.deadline.remaining_for_hooks() - self.deadline.slack(_WAIT_SLACK_MAX, _WAIT_SLACK_FRACTION)
        if until > end:
            cut = f"cut to {max(0.0, end - now):.1f} s by the shutdown deadline"
            detail = f"{detail}; {cut}" if detail else cut
        step.detail = detail
        await trio.sleep_until(min(until, end))

    async def _record(self, events: EventRecorder, reason: str, note: str, warning: bool) -> None:
        await events.record(reason, note, action="Drain", deadline=self.deadline, warning=warning)


def _no_time(state: PodState, left: float, drain: DrainSettings) -> str:
    """Why the drain cannot look, in the terms the user set."""
    grace = state.meta.get("deletionGracePeriodSeconds")
    budget = f"grace period {grace} s" if isinstance(grace, int) else f"the deadline leaves hooks {left:.1f} s"
    return (
        f"{budget} is shorter than propagation_delay {drain.propagation_delay:g} s "
        f"plus time to list and watch ({left:.1f} s left for hooks)"
    )


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
