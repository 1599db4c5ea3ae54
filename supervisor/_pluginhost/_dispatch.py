"""Dispatch: calling the enabled implementations of a hook, each under its limits.

pluggy knows how to register plugins and validate hook implementations, but
not how to await them: ``pm.hook.x()`` would return un-awaited coroutines and
stop at the first exception.  So the dispatcher asks pluggy for the
implementations of a hook and runs each in its own trio task, under its
plugin's timeout and the plan's deadline, catching and logging whatever it
raises.  One plugin's bug is a log line and a timeline entry, never a stuck
or dead PID 1.

Order: implementations of one hook run concurrently — three 1 s ``pre_stop``
hooks take 1 s — except that pluggy's ``tryfirst`` and ``trylast`` are kept
as waves: every ``tryfirst`` implementation has returned (or been cut off)
before the plain ones start, and those before the ``trylast`` ones.  One
deadline bounds all waves, so an early wave that overruns leaves the later
ones less time, never more than the plan has.
"""

from __future__ import annotations

import functools
import inspect
import logging
import math
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

import pluggy
import trio

from .._context import Context
from .._hooks import Binding, HookCall
from .._timeline import Step, Timeline
from ..hookspec import SKIP, HookFailed
from ._enable import EnabledPlugin
from ._registry import Registry

__all__ = ["Dispatcher"]

SKIPPED = "skipped"
_BACKGROUND = "supervisor_background"

# Hooks that run outside the shutdown plan get this long unless the plugin's
# section sets hook_timeout: long enough for an API call, short enough that
# a hang cannot hold the start-up or an event queue for ever.
_DEFAULT_EVENT_TIMEOUT = 30.0

# Enough for every hook of every plugin at once, abandoned ones included.
_HOOK_THREADS = trio.CapacityLimiter(256)


@dataclass(frozen=True)
class _Attempt:
    """One implementation's part in one HookCall."""

    call: HookCall
    impl: pluggy.HookImpl
    plugin: EnabledPlugin
    ctx: Context

    @property
    def timeout(self) -> float:
        # A background task runs until the shutdown cancels it: no timeout,
        # whatever the plugin's hook_timeout says about its other hooks.
        if self.call.hook == _BACKGROUND:
            return math.inf
        if self.plugin.hook_timeout is not None:
            return self.plugin.hook_timeout
        # In the shutdown the deadline is the bound; outside it, a default.
        return math.inf if self.call.deadline is not None else _DEFAULT_EVENT_TIMEOUT

    def arguments(self) -> list[Any]:
        # pluggy checked at registration that every name is in the spec;
        # an implementation declares only the ones it uses, in its order.
        available = {"ctx": self.ctx, "deadline": self.call.deadline, **self.call.arguments}
        return [available[name] for name in self.impl.argnames]

    def scope(self) -> AbstractContextManager[trio.CancelScope]:
        deadline = self.call.deadline
        return trio.move_on_after(self.timeout) if deadline is None else deadline.scope(timeout=self.timeout)


class Dispatcher:
    """Runs hooks for the enabled plugins, once they are bound to a run."""

    def __init__(self, registry: Registry, enabled: Mapping[str, EnabledPlugin]) -> None:
        self._registry = registry
        self._enabled = enabled
        self.contexts: dict[str, Context] = {}

    def bind(self, binding: Binding) -> None:
        """One Context per enabled plugin; hooks run only for bound plugins."""
        for name, plugin in self._enabled.items():
            self.contexts[name] = Context(
                plugin=name,
                settings=plugin.settings,
                config=binding.config,
                log=logging.getLogger(f"supervisor.plugin.{name}"),
                processes=binding.processes,
                timeline=binding.timeline,
                main_exited=binding.main_exited,
                board=binding.board,
            )

    def implementations(self, hook_name: str) -> list[pluggy.HookImpl]:
        """The bound plugins' implementations, in pluggy's call order.  Plugins
        registered but not enabled (``supervisor plugins`` registers every
        installed one) are not among them."""
        return [i for i in self._registry.impls(hook_name) if i.plugin_name in self.contexts]

    async def run(self, call: HookCall) -> None:
        """Every implementation, wave by wave, each wave concurrently."""
        for wave in _waves(self.implementations(call.hook)):
            async with trio.open_nursery() as nursery:
                for impl in wave:
                    nursery.start_soon(self._run_one, self._attempt(call, impl))

    def spawn(self, nursery: trio.Nursery, call: HookCall) -> None:
        """``run`` in ``nursery``, not waited for."""
        if self.implementations(call.hook):
            nursery.start_soon(self.run, call)

    def _attempt(self, call: HookCall, impl: pluggy.HookImpl) -> _Attempt:
        return _Attempt(call, impl, self._enabled[impl.plugin_name], self.contexts[impl.plugin_name])

    async def _run_one(self, attempt: _Attempt) -> None:
        if attempt.call.phase is None:
            await _guarded(attempt, None)
            return
        timeline = attempt.ctx.timeline
        with timeline.step(attempt.call.phase, attempt.call.step, plugin=attempt.plugin.name) as step:
            step.outcome = await _guarded(attempt, step)
        if step.outcome == SKIPPED or (step.outcome == "ok" and _has_own_steps(timeline, step)):
            # A hook that recorded its own steps (one per exec command, say)
            # is told by them; a row for the hook itself would say it twice.
            timeline.discard(step)


def _has_own_steps(timeline: Timeline, step: Step) -> bool:
    """Whether the hook of ``step`` recorded steps of its own inside it."""
    return any(
        other is not step
        and other.plugin == step.plugin
        and other.phase == step.phase
        and step.start <= other.start <= step.start + step.duration
        for other in timeline.steps
    )


def _waves(impls: list[pluggy.HookImpl]) -> Iterator[list[pluggy.HookImpl]]:
    """``tryfirst``, plain and ``trylast`` implementations, in that order,
    leaving out empty waves (no extra nursery for a plain hook)."""
    for wave in (
        [i for i in impls if i.tryfirst],
        [i for i in impls if not (i.tryfirst or i.trylast)],
        [i for i in impls if i.trylast],
    ):
        if wave:
            yield wave


async def _guarded(attempt: _Attempt, step: Step | None) -> str:
    """Run one implementation within its scope; return its outcome word."""
    hook_log = attempt.ctx.log
    hook = attempt.call.hook
    result: object = None
    with attempt.scope() as scope:
        try:
            result = await _invoke(attempt.impl.function, attempt.arguments())
        except HookFailed as exc:
            hook_log.error("%s failed: %s", hook, exc)
            if step is not None:
                step.detail = str(exc)
            return "failed"
        except Exception as exc:
            hook_log.error("%s failed: %s: %s", hook, type(exc).__name__, exc, exc_info=exc)
            if step is not None:
                step.detail = f"{type(exc).__name__}: {exc}"
            return "error"
    if scope.cancelled_caught:
        return _cut_short(attempt)
    return SKIPPED if result is SKIP else "ok"


def _cut_short(attempt: _Attempt) -> str:
    """Why an implementation's scope ended before it did, logged."""
    hook_log, hook, deadline = attempt.ctx.log, attempt.call.hook, attempt.call.deadline
    if deadline is not None and deadline.expired:
        hook_log.warning("%s cut short: the shutdown deadline leaves no more time", hook)
        return "cancelled"
    # The scope ends at the deadline less the reserve (the reserve is for
    # stopping processes) and less what plugins keep for their steps after
    # the stops; the float comparison needs a hair of tolerance.
    if deadline is not None and deadline.remaining() <= deadline.reserve + deadline.kept + 1e-9:
        kept = f" and {deadline.kept:.3f}s for the steps after them" if deadline.kept else ""
        hook_log.warning("%s cut short to keep %.3fs in reserve for stopping processes%s", hook, deadline.reserve, kept)
    else:
        hook_log.warning("%s timed out", hook)
    return "timeout"


async def _invoke(function: Callable[..., Any], arguments: list[Any]) -> object:
    """Run one hook implementation to its result.

    A plain ``def`` runs in a worker thread: blocking I/O in it (a synchronous
    HTTP call, ``time.sleep``) must not freeze the event loop, and when its
    scope is cancelled (deadline, timeout) the thread is abandoned — it runs
    on, but nobody waits for it.  Its own limiter, so that abandoned threads
    never use up trio's default one.  An ``async def`` runs on the loop; one
    that never yields is the init layer's problem (it kills at the wall)."""
    if inspect.iscoroutinefunction(function):
        result: object = await function(*arguments)
    else:
        result = await trio.to_thread.run_sync(
            functools.partial(function, *arguments), abandon_on_cancel=True, limiter=_HOOK_THREADS
        )
    if inspect.isawaitable(result):
        result = await result
    return result
