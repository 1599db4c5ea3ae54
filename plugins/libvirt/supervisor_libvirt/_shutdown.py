"""Shut the selected domains down, concurrently, within the plan's deadline.

Per domain (``mode: shutdown``): press the ACPI power button (through the
guest agent if configured for it), press again every ``resend_interval``
because a press during boot is lost, and wait until the domain is off
(lifecycle events wake the wait, a state poll confirms it).  When the
domain's graceful window ends -- ``shutdown_timeout``, its own requested-at +
grace, or the deadline less the time kept to destroy -- destroy it, gracefully
(SIGTERM to QEMU) first and plainly if that fails.  ``mode: managedsave``
saves the guest's memory instead and falls back to the above if saving fails.

A destroy that fails (libvirtd restarting) is tried again until the hook's
end.  When the hook is cut before every guest is off -- the deadline, its
hook_timeout, a second SIGTERM (which means "hurry", not "abandon") -- the
guests still running get a last plain destroy, all at once, in a shielded
window that ends well before the wall (``last_chance_end``), so that the
supervisor still escalates and logs its timeline itself.
"""

from __future__ import annotations

import fnmatch
import logging
import math
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field

import trio

from supervisor import Deadline, Step, Timeline, format_duration

from . import _domains as ops
from ._actions import FINAL, destroy, notifying
from ._binding import NO_DOMAIN, OPERATION_INVALID, LibvirtFailure
from ._connection import Hypervisor
from ._domains import Domain
from ._settings import LibvirtSettings

__all__ = ["Batch", "DomainShutdown", "Report", "Result", "hook_end", "shut_down_all"]

# Outcomes recorded in the timeline, one per domain; libvirt's shutoff reason
# tells them apart.  "shut down": the guest powered itself off; "destroyed":
# by this plugin; "gone": off for another reason (destroyed by someone else,
# saved, migrated, vanished); "crashed"; "failed": still running, the plugin
# could not stop it; "destroying": the hook was cut while a destroy was on its
# way (it becomes "destroyed" if the destroy completes before the timeline is
# written); "cancelled": cut before that.
SHUT_DOWN = "shut down"
SAVED = "saved"
DESTROYED = "destroyed"
GONE = "gone"
CRASHED = "crashed"
FAILED = "failed"
DESTROYING = "destroying"
CANCELLED = "cancelled"
# The stage of a guest whose last destroy is on its way.
LAST_DESTROY = "destroying (the last destroy)"

_OTHER_ENDS = {
    ops.SHUTOFF_DESTROYED: (GONE, "destroyed by someone else"),
    ops.SHUTOFF_CRASHED: (CRASHED, "crashed"),
    ops.SHUTOFF_FAILED: (CRASHED, "failed"),
    ops.SHUTOFF_SAVED: (GONE, "saved by someone else"),
    ops.SHUTOFF_MIGRATED: (GONE, "migrated away"),
    ops.SHUTOFF_DAEMON: (GONE, "killed by libvirtd as it reconnected"),
}
# How long to wait for the STOPPED event of a domain that vanished (a
# transient one once off) to learn why: events may trail the state call.
_REASON_WAIT = 1.0
# How long a shutdown request still in flight when its guest is seen off
# may take to be answered and logged: one libvirt call, normally milliseconds.
_REPORT_IN_FLIGHT = 1.0
# Of what the hook has, the share kept back to destroy what is still running
# at the end (capped at destroy_reserve).  A quarter: a destroy is one call
# that returns in well under a second unless QEMU is stuck, so the guests'
# graceful shutdown keeps most of a short budget, and a long budget keeps
# the whole destroy_reserve.
_DESTROY_SHARE = 0.25
# Once the hook is cut, of the time left until the wall, the share the last
# destroys may use, and its cap.  At the usual cut (the deadline's reserve
# plus its margin before the wall) 60 % ends before the orchestrator's own
# escalation; after a second SIGTERM it is 0.6 s of the 1 s slice, and the
# 0.4 s left is what the orchestrator needs to kill, reap and log.  QEMU gets
# its signal as soon as libvirtd has the call; libvirt's answer comes once
# QEMU has exited and it has cleaned up (over a second on a loaded machine),
# and a call still on its way at the window's end is left to libvirtd.
_LAST_CHANCE_SHARE = 0.6
_LAST_CHANCE_MAX = 2.0
# Between last destroys while libvirtd does not answer (the connection
# itself retries at most once per its retry_interval).
_LAST_RETRY = 0.1


@dataclass
class Result:
    outcome: str
    detail: str = ""


class _Gone(Exception):
    """The domain vanished (transient domains do once shut off)."""


@dataclass(frozen=True, slots=True)
class Report:
    """Where a shutdown's outcomes go: one step per domain in ``timeline``,
    in ``phase`` under ``plugin``'s name, and lines in ``log``."""

    timeline: Timeline
    phase: str
    plugin: str
    log: logging.Logger
    failures: list[str] = field(default_factory=list)

    def step(self, name: str) -> AbstractContextManager[Step]:
        return self.timeline.step(self.phase, name, plugin=self.plugin)

    def failure(self, detail: str) -> None:
        """A failed step for the shutdown as a whole (the domains could not be listed)."""
        self.failures.append(detail)
        with self.step("domains") as step:
            step.outcome, step.detail = FAILED, detail

    def problem(self, results: dict[str, Result]) -> str | None:
        """What went wrong, for the hook's own step: its outcome must not
        say ``ok`` above domain steps that say ``failed``."""
        left = sorted(name for name, result in results.items() if result.outcome == FAILED)
        if left:
            self.failures.append(f"{len(left)} guest(s) still running: {', '.join(left)}")
        return "; ".join(self.failures) or None


@dataclass(frozen=True, slots=True)
class Batch:
    """What the domains of one shutdown share: the connection, the settings,
    the log, and the time.  ``hooks_end()`` is when the host cancels the
    hook (re-read: the deadline may move earlier); ``reserve`` is kept
    before it to destroy what is still running."""

    hv: Hypervisor
    settings: LibvirtSettings
    log: logging.Logger
    hooks_end: Callable[[], float]
    reserve: float
    wall_clock: Callable[[], float] = field(default=time.time)

    def graceful_end(self) -> float:
        """When the graceful part of every domain ends at the latest."""
        return self.hooks_end() - self.reserve


async def shut_down_all(
    hv: Hypervisor,
    settings: LibvirtSettings,
    deadline: Deadline,
    report: Report,
    *,
    wall_clock: Callable[[], float] = time.time,
) -> dict[str, Result]:
    """Handle every selected running domain; return outcomes by domain name."""
    log = report.log
    started = trio.current_time()
    hooks_end = _hooks_end(deadline, settings, started)
    reserve = deadline.slack(settings.destroy_reserve, _DESTROY_SHARE, of=hooks_end() - started)
    batch = Batch(hv, settings, log, hooks_end, reserve, wall_clock)

    domains, failure = await _list(hv, settings, batch.graceful_end)
    if domains is None:
        detail = f"cannot list domains: {failure}" if failure else "listing the domains took the whole budget"
        log.error("%s on %s", detail, hv.uri)
        report.failure(detail)
        return {}
    if not domains:
        log.info("no running domains to shut down on %s", hv.uri)
        return {}
    log.info(
        "shutting down %d domain(s) (%s): mode %s, %s for the graceful part",
        len(domains),
        ops.names(domains),
        settings.mode,
        format_duration(max(0.0, batch.graceful_end() - started)),
    )
    results: dict[str, Result] = {}
    slots = trio.Semaphore(settings.max_parallel or len(domains))
    jobs = [DomainShutdown(batch, domain) for domain in domains]
    try:
        async with trio.open_nursery() as nursery:
            for job in jobs:
                nursery.start_soon(_one, job, slots, report, results)
    finally:
        left = [job for job in jobs if results.get(job.domain.name, Result(FAILED)).outcome == FAILED]
        if left:  # the hook was cut, or destroys failed until its end
            with trio.CancelScope(shield=True), trio.move_on_at(last_chance_end(deadline)):
                await _last_chance(left, results, log)
            for job in left:
                job.unconfirmed(results)
        report_left_running(jobs, results, log)
    return results


def last_chance_end(deadline: Deadline) -> float:
    """Until when the guests still running when the hook is cut may be
    destroyed: a share of the time left before the wall (see
    ``_LAST_CHANCE_SHARE``)."""
    now = trio.current_time()
    return now + min(_LAST_CHANCE_MAX, _LAST_CHANCE_SHARE * max(0.0, deadline.wall - now))


def hook_end(deadline: Deadline, settings: LibvirtSettings) -> Callable[[], float]:
    """The latest moment the hook may still wait for something (the
    connection's close): its end as the host sees it."""
    return _hooks_end(deadline, settings, trio.current_time())


async def _last_chance(jobs: list[DomainShutdown], results: dict[str, Result], log: logging.Logger) -> None:
    """Destroy, plainly and all at once, the guests still running as the hook
    is cut; the caller bounds it."""
    log.warning(
        "the shutdown ends with %d guest(s) not yet off (%s): destroying them now",
        len(jobs),
        ", ".join(job.domain.name for job in jobs),
    )
    # A plain destroy already on its way needs no second one, and waiting
    # for its answer would only take time from the processes' stop.
    async with trio.open_nursery() as nursery:
        for job in jobs:
            if not job.plain_destroy_in_flight():
                nursery.start_soon(job.last_destroy, results)


def report_left_running(jobs: list[DomainShutdown], results: dict[str, Result], log: logging.Logger) -> None:
    """One line naming every guest still running as the shutdown ends (its
    hook cut, a destroy failed), with its last known state; another for the
    guests whose destroy was sent but not yet confirmed."""
    for outcome, level, what in (
        (FAILED, logging.ERROR, "still running"),
        (DESTROYING, logging.WARNING, "being destroyed (sent, not yet confirmed)"),
    ):
        left = [job for job in jobs if results.get(job.domain.name, Result(FAILED)).outcome == outcome]
        if left:
            names = "; ".join(f"{job.domain.name} ({job.where()})" for job in left)
            log.log(level, "%d guest(s) %s as the shutdown ends: %s", len(left), what, names)


async def _list(
    hv: Hypervisor, settings: LibvirtSettings, end: Callable[[], float]
) -> tuple[list[Domain] | None, LibvirtFailure | None]:
    """The selected running domains; while libvirtd is unreachable (it may be
    restarting right now), keep trying until ``end()``."""
    failure: LibvirtFailure | None = None
    with trio.move_on_at(end()):
        while True:
            try:
                return await hv.call(ops.list_domains(settings.selection)), None
            except LibvirtFailure as exc:
                failure = exc
                if not exc.connection_lost:
                    break
            await trio.sleep(hv.retry_interval)
    return None, failure


async def _one(job: DomainShutdown, slots: trio.Semaphore, report: Report, results: dict[str, Result]) -> None:
    async with slots:
        with report.step(f"domain {job.domain.name}") as step:
            job.step = step
            result: Result | None = None
            try:
                result = await job.run()
            finally:
                if result is None:  # cut (or raised: the timeline says "error")
                    job.cut(step)
            results[job.domain.name] = result
            step.outcome, step.detail = result.outcome, result.detail


def _hooks_end(deadline: Deadline, settings: LibvirtSettings, started: float) -> Callable[[], float]:
    """When the host will cancel this hook: the deadline less its reserve, or
    the plugin's hook_timeout; re-read each time because the deadline may
    move earlier (a second SIGTERM, the pod's real deletion time)."""
    own = started + settings.hook_timeout if settings.hook_timeout is not None else math.inf
    return lambda: min(own, deadline.at - deadline.reserve)


class DomainShutdown:
    """One domain's graceful shutdown, then its destroy if needed."""

    def __init__(self, batch: Batch, domain: Domain) -> None:
        self.hv = batch.hv
        self.settings = batch.settings
        self.domain = domain
        self.log = batch.log
        self.wall_clock = batch.wall_clock
        self.started = trio.current_time()
        self._own_end = math.inf
        self._batch = batch
        self.presses = 0
        self.agent = domain.request.guest_agent or any(
            fnmatch.fnmatchcase(domain.name, p) for p in batch.settings.guest_agent
        )
        # What the "still running" report and a cut timeline step say.
        self.stage = "waiting for its turn"
        self.last_state = "running"
        # When and why the normal path ended with the guest not yet off (the
        # hook cut, its destroys failed): what a later destroy is measured from.
        self._ended: tuple[float, str] | None = None
        self._destroyed_late = False
        self._graceful_until = math.inf  # when its destroy turns plain, once it began
        self.step: Step | None = None  # its timeline step, once its turn came

    def graceful_end(self) -> float:
        """When to stop waiting and destroy: the domain's own limit, or the
        hook's end less the time kept for destroying."""
        return min(self._own_end, self._batch.graceful_end())

    async def run(self) -> Result:
        # The timeout counts from the domain's turn (max_parallel may have
        # kept it waiting); a requested-at + grace is absolute.
        self.started = trio.current_time()
        self.stage = "shutting down"
        self.hv.stopped(self.domain.uuid)  # from now on, keep why it stops
        self._own_end = self.started + self.settings.shutdown_timeout
        due = self.domain.request.due(self.settings.enforcer.grace)
        if due is not None:
            self._own_end = min(self._own_end, self.started + (due - self.wall_clock()))
        try:
            if self.settings.mode == "managedsave":
                result = await self._save()
                if result is not None:
                    return result
            result = await self._graceful()
            if result is not None:
                return result
            return await self._destroy()
        except _Gone:
            return await self._vanished()

    def where(self) -> str:
        """Its last known state and what the plugin was doing."""
        return f"{self.last_state}; {self.stage}"

    def cut(self, step: Step) -> None:
        """The hook ended before this domain did: say so in its step."""
        self._ended = (trio.current_time(), "the hook was cut")
        if self.stage == "destroying":
            step.outcome = DESTROYING
            step.detail = f"destroy in progress when the hook was cut, after {self._summary()}"
        else:
            step.outcome = CANCELLED
            step.detail = f"{self.where()} when the hook was cut, after {self._summary()}"

    def _destroy_completed(self) -> None:
        """A destroy call returned (in trio's thread, also after a cut, after
        the step was written, after the hook returned)."""
        if self._ended is None or self._destroyed_late:
            return  # neither cut nor failed: _destroy reports it; or reported already
        self._destroyed_late = True
        self.last_state = "shut off"
        ended_at, why = self._ended
        late = trio.current_time() - ended_at
        if self.step is not None:
            self.step.outcome = DESTROYED
            self.step.detail = f"completed {format_duration(late)} after {why}; {self.step.detail}"
            self.step.duration += late
        self.log.warning("%s: destroyed %s after %s", self.domain.name, format_duration(late), why)

    async def last_destroy(self, results: dict[str, Result]) -> None:
        """This guest was not off as the hook ended (cut, or its destroys
        failed until then): destroy it plainly, retrying while libvirtd is
        unreachable; the caller bounds the time.  QEMU gets its signal as
        libvirtd receives the call, so a call still on its way when the
        time is up is left to finish (``unconfirmed``)."""
        name = self.domain.name
        in_flight = self.stage == "destroying"
        if self._ended is None:
            self._ended = (trio.current_time(), "its destroys failed until the hook's end")
        op = notifying(self.hv, ops.destroy(self.domain.uuid, graceful=False), self._destroy_completed)
        while True:
            self.stage = LAST_DESTROY
            try:
                await self.hv.call(op)
            except LibvirtFailure as exc:
                if exc.code in FINAL and (in_flight or self._destroyed_late):
                    # The destroy in flight at the cut did it; its step is
                    # amended once that call returns.
                    self.last_state = "shut off"
                    results[name] = Result(DESTROYED, f"by the destroy in flight at the cut; {self._summary()}")
                    return
                if exc.code in FINAL:  # off or gone meanwhile, some other way
                    self.last_state = "shut off"
                    results[name] = Result(GONE, f"off when destroyed after the cut: {exc.message}")
                    return
                self.stage = f"last destroy failed: {exc}"
                await trio.sleep(_LAST_RETRY)
                continue
            results[name] = Result(DESTROYED, f"by the last destroy; {self._summary()}")
            return

    def plain_destroy_in_flight(self) -> bool:
        """Whether a plain destroy (SIGKILL after libvirt's own wait) is on
        its way; a graceful one never escalates, so it does not count."""
        return self.stage == "destroying" and trio.current_time() >= self._graceful_until

    def unconfirmed(self, results: dict[str, Result]) -> None:
        """The last destroy's time is up: a call still on its way is in
        libvirtd's hands (the step becomes "destroyed" if it returns before
        the timeline is written)."""
        name = self.domain.name
        in_flight = self.stage == LAST_DESTROY or self.plain_destroy_in_flight()
        if not in_flight or results.get(name, Result(FAILED)).outcome != FAILED:
            return
        result = Result(DESTROYING, f"destroy sent as the shutdown ended, not yet confirmed; {self._summary()}")
        results[name] = result
        if self.step is not None:
            self.step.outcome, self.step.detail = result.outcome, result.detail

    # ------------------------------------------------------------------

    async def _save(self) -> Result | None:
        name = self.domain.name
        if not self.domain.persistent:
            self.log.info("%s: transient, cannot be saved; shutting it down instead", name)
            return None
        self.stage = "saving"
        with trio.move_on_at(self.graceful_end()):
            try:
                await self.hv.call(ops.managed_save(self.domain.uuid, bypass_cache=self.settings.bypass_cache))
            except LibvirtFailure as exc:
                if exc.code == NO_DOMAIN:
                    raise _Gone from None
                self.log.warning("%s: managed save failed: %s; shutting it down instead", name, exc)
                return None
            self.log.info("%s: saved in %s", name, self._elapsed())
            return Result(SAVED, f"in {self._elapsed()}")
        self.log.warning("%s: managed save did not finish in time", name)
        return None

    async def _graceful(self) -> Result | None:
        """Press and wait until off; None if the window ended first."""
        self.stage = "shutting down"
        off = trio.Event()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._press_repeatedly, off)
            result = await self._wait_until_off(self.graceful_end)
            if result is None:
                nursery.cancel_scope.cancel()  # on to the destroy, at once
            else:
                # A guest that powers off at once is seen off while the
                # request that did it is still being answered; cancelling
                # that request would lose its log lines (what the driver
                # refused, which flags it took).  It gets a moment to finish.
                off.set()
                nursery.cancel_scope.deadline = trio.current_time() + _REPORT_IN_FLIGHT
        return result

    async def _press_repeatedly(self, off: trio.Event) -> None:
        name = self.domain.name
        flags = ops.shutdown_flags(agent=self.agent)
        while not off.is_set():
            try:
                accepted = await self.hv.call(ops.request_shutdown(self.domain.uuid, flags))
            except LibvirtFailure as exc:
                if exc.code in FINAL:
                    return  # gone or no longer running: the waiter's poll sees it
                if not exc.connection_lost:  # a lost connection is reported once, by hv
                    self.log.warning("%s: shutdown request failed: %s", name, exc)
                await trio.sleep(min(self.settings.resend_interval, self.hv.retry_interval))
                continue
            for refused_flags, why in accepted.refused:
                self.log.info(
                    "%s: the driver refused %s (%s); falling back",
                    name,
                    ops.describe_flags(refused_flags),
                    why,
                )
            flags = accepted.flags
            self.presses += 1
            if self.presses == 1:
                self.log.info("%s: shutdown requested (%s)", name, ops.describe_flags(flags))
            elif reboots := self.hv.rebooted(self.domain.uuid):
                # Not the same as ignoring the button: the guest's ACPI
                # handler (or its on_poweroff) reboots instead of powering off.
                self.log.warning(
                    "%s: rebooted instead of powering off (%d time(s)); shutdown request %d",
                    name,
                    reboots,
                    self.presses,
                )
            else:
                self.log.info("%s: still running; shutdown request %d", name, self.presses)
            with trio.move_on_after(self.settings.resend_interval):
                await off.wait()

    async def _wait_until_off(self, end: Callable[[], float]) -> Result | None:
        """Wait for the domain to be off, until ``end()``; None if it is not."""
        name = self.domain.name
        while True:
            try:
                state = await self.hv.call(ops.state(self.domain.uuid))
            except LibvirtFailure as exc:
                if exc.code == NO_DOMAIN:
                    return await self._vanished()
                if not exc.connection_lost:
                    self.log.warning("%s: cannot read its state: %s", name, exc)
            else:
                self.last_state = ops.describe_state(state)
                if ops.is_off(state):
                    return self._off(state[1])
            stop_at = end()
            now = trio.current_time()
            if now >= stop_at:
                return None
            stopped = self.hv.stopped(self.domain.uuid)
            with trio.move_on_at(min(stop_at, now + self.settings.poll_interval)):
                await stopped.wait()

    async def _vanished(self) -> Result:
        """The domain is gone (a transient one once off): its STOPPED event
        says why, if it came or comes within a moment."""
        stopped = self.hv.stopped(self.domain.uuid)
        with trio.move_on_at(min(trio.current_time() + _REASON_WAIT, self._batch.hooks_end())):
            await stopped.wait()
        reason = self.hv.stop_reason(self.domain.uuid)
        if reason is None:
            return Result(GONE, f"vanished; {self._summary()}")
        return self._off(reason)

    def _off(self, reason: int) -> Result:
        """The domain is off, for libvirt's shutoff ``reason``."""
        name = self.domain.name
        self.last_state = "shut off"
        if reason == ops.SHUTOFF_SHUTDOWN:
            self.log.info("%s: shut down after %s", name, self._elapsed())
            return Result(SHUT_DOWN, self._summary())
        outcome, why = _OTHER_ENDS.get(reason, (GONE, f"off (shutoff reason {reason})"))
        self.log.warning("%s: %s after %s", name, why, self._elapsed())
        return Result(outcome, f"{why}; {self._summary()}")

    async def _destroy(self) -> Result:
        name = self.domain.name
        self.stage = "destroying"
        reboots = self.hv.rebooted(self.domain.uuid)
        self.log.warning(
            "%s: still running after %s and %d shutdown request(s)%s; destroying it",
            name,
            self._elapsed(),
            self.presses,
            f", having rebooted {reboots} time(s)" if reboots else "",
        )
        # Half of what is left for the graceful destroy (QEMU gets SIGTERM
        # and flushes its disks), the other half kept for the plain one
        # (SIGKILL) if that does not finish: a guest that is destroyed late
        # is better than one left running.
        attempts = 0
        while True:
            attempts += 1
            self.stage = "destroying"
            now = trio.current_time()
            graceful_until = now + max(0.0, self._batch.hooks_end() - now) / 2
            self._graceful_until = graceful_until
            try:
                graceful_error = await destroy(
                    self.hv, self.domain.uuid, graceful_until=graceful_until, on_done=self._destroy_completed
                )
            except LibvirtFailure as exc:
                settled = await self._destroy_failed(exc, attempts)
                if settled is not None:
                    return settled
                # libvirtd may be back in a moment (a restart): again until
                # the hook's end, then in the last chance (see shut_down_all).
                retry_at = trio.current_time() + self.hv.retry_interval
                if retry_at >= self._batch.hooks_end():
                    return Result(FAILED, f"destroy failed {attempts} time(s): {exc}")
                await trio.sleep_until(retry_at)
                continue
            break
        self.last_state = "shut off"
        again = f" (attempt {attempts})" if attempts > 1 else ""
        if graceful_error is None:
            self.log.warning("%s: destroyed%s after %s", name, again, self._summary())
            return Result(DESTROYED, f"after {self._summary()}")
        self.log.warning(
            "%s: graceful destroy failed (%s); destroyed it plainly%s after %s",
            name,
            graceful_error,
            again,
            self._summary(),
        )
        return Result(DESTROYED, f"after {self._summary()}; graceful destroy failed: {graceful_error}")

    async def _destroy_failed(self, exc: LibvirtFailure, attempts: int) -> Result | None:
        """The outcome if the failed destroy settles it (the guest is off or
        gone); None if it is still running and the destroy is to be retried."""
        if exc.code == NO_DOMAIN:
            return await self._vanished()
        if exc.code == OPERATION_INVALID:
            # Not running: it went off just before the destroy; its state says how.
            try:
                state = await self.hv.call(ops.state(self.domain.uuid))
            except LibvirtFailure as again:
                if again.code == NO_DOMAIN:
                    return await self._vanished()
            else:
                if ops.is_off(state):
                    return self._off(state[1])
        self.stage = f"destroy failed: {exc}; retrying"
        if attempts == 1:
            self.log.error("%s: destroy failed: %s; trying again until the shutdown ends", self.domain.name, exc)
        return None

    def _elapsed(self) -> str:
        return format_duration(trio.current_time() - self.started)

    def _summary(self) -> str:
        presses = f"{self.presses} request{'s' if self.presses != 1 else ''}"
        return f"{presses}, {self._elapsed()}"
