"""The plugin host: discovery with isolation, settings, and async fan-out.

pluggy knows how to register plugins and validate hook implementations, but
not how to await them: ``pm.hook.x()`` would return un-awaited coroutines and
stop at the first exception.  So the host asks pluggy for the implementations
of a hook and runs each in its own trio task, under its plugin's timeout and
the plan's deadline, catching and logging whatever it raises.  One plugin's
bug is a log line and a timeline entry, never a stuck or dead PID 1.
"""

from __future__ import annotations

import argparse
import functools
import importlib.metadata
import inspect
import logging
import math
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

import pluggy
import trio

from . import hookspec
from ._context import Context, ProcessInfo
from ._deadline import Deadline
from ._timeline import Timeline
from .config import Config, ConfigError, Problem, Settings
from .health.board import Board
from .hookspec import SKIP

__all__ = ["ENTRY_POINT_GROUP", "PluginHost"]

ENTRY_POINT_GROUP = "supervisor.plugins"
SKIPPED = "skipped"
HOOK_TIMEOUT_KEY = "hook_timeout"

# Hooks that run outside the shutdown plan get this long unless the plugin's
# section sets hook_timeout: long enough for an API call, short enough that
# a hang cannot hold the start-up or an event queue for ever.
_DEFAULT_EVENT_TIMEOUT = 30.0
_SYNC_ONLY_HOOKS = frozenset({"supervisor_configure", "supervisor_add_commands"})

log = logging.getLogger("supervisor.plugins")


async def _invoke(call: Callable[..., Any], args: list[Any]) -> object:
    """Run one hook implementation to its result.

    A plain ``def`` runs in a worker thread: blocking I/O in it (a synchronous
    HTTP call, ``time.sleep``) must not freeze the event loop, and when its
    scope is cancelled (deadline, timeout) the thread is abandoned — it runs
    on, but nobody waits for it.  Its own limiter, so that abandoned threads
    never use up trio's default one.  An ``async def`` runs on the loop; one
    that never yields is the init layer's problem (it kills at the wall)."""
    if inspect.iscoroutinefunction(call):
        result: object = await call(*args)
    else:
        result = await trio.to_thread.run_sync(
            functools.partial(call, *args), abandon_on_cancel=True, limiter=_HOOK_THREADS
        )
    if inspect.isawaitable(result):
        result = await result
    return result


# Enough for every hook of every plugin at once, abandoned ones included.
_HOOK_THREADS = trio.CapacityLimiter(256)


@dataclass
class _Plugin:
    name: str
    distribution: str
    entry_point: importlib.metadata.EntryPoint | None = None
    obj: object | None = None
    load_error: str | None = None
    settings: object = None
    hook_timeout: float | None = None

    def load(self) -> object | None:
        """Import the plugin on first use; a failure is remembered, not raised:
        a broken plugin must not break the rest."""
        if self.obj is None and self.load_error is None and self.entry_point is not None:
            try:
                obj = self.entry_point.load()
                self.obj = obj() if inspect.isclass(obj) else obj
            except Exception as exc:
                self.load_error = f"{type(exc).__name__}: {exc}"
                log.debug("plugin %s failed to load: %s", self.name, self.load_error)
        return self.obj


@dataclass
class PluginHost:
    manager: pluggy.PluginManager
    installed: dict[str, _Plugin]
    enabled: dict[str, _Plugin] = field(default_factory=dict)
    contexts: dict[str, Context] = field(default_factory=dict)

    # ------------------------------------------------------------------
    # Discovery and configuration
    # ------------------------------------------------------------------

    @classmethod
    def empty(cls) -> PluginHost:
        """A host with no plugins yet (tests and embedding add them with ``add``)."""
        manager = pluggy.PluginManager(hookspec.PROJECT)
        manager.add_hookspecs(hookspec)
        return cls(manager, {})

    @classmethod
    def discover(cls) -> PluginHost:
        """Find every entry point of the group.  Plugins are imported only
        when used (enabled, listed, asked for their commands), each on its
        own: one that fails to import is reported if the configuration
        enables it, and the others still load."""
        host = cls.empty()
        for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
            dist = f"{ep.dist.name} {ep.dist.version}" if ep.dist else "?"
            host.installed.setdefault(ep.name, _Plugin(ep.name, dist, entry_point=ep))
        return host

    def add(self, name: str, obj: object) -> None:
        """Make a plugin object available without an entry point (embedding, tests)."""
        self.installed[name] = _Plugin(name, "(registered directly)", obj=obj)

    def _register(self, plugin: _Plugin) -> str | None:
        """Register with pluggy; returns a problem description or None."""
        if self.manager.is_registered(plugin.obj):
            return None
        try:
            self.manager.register(plugin.obj, name=plugin.name)
            self.manager.check_pending()
        except pluggy.PluginValidationError as exc:
            if plugin.obj is not None and self.manager.is_registered(plugin.obj):
                self.manager.unregister(plugin.obj)
            return str(exc)
        for hook_name in self._hook_names(plugin.name):
            impl = self._impl(hook_name, plugin.name)
            if hook_name in _SYNC_ONLY_HOOKS and inspect.iscoroutinefunction(impl.function):
                self.manager.unregister(plugin.obj)
                return f"{hook_name} must be a plain function, not async"
            if impl.hookwrapper or impl.wrapper:
                self.manager.unregister(plugin.obj)
                return f"{hook_name}: hook wrappers are not supported (hooks may be async)"
        return None

    def enable(self, config: Config) -> None:
        """Enable the plugins named in ``config.plugins`` and let each validate
        its own section.  Raises ConfigError with every problem found."""
        problems: list[Problem] = []
        for name, settings in config.plugins.items():
            assert isinstance(settings, Settings)
            plugin = self.installed.get(name)
            if plugin is None:
                known = ", ".join(sorted(self.installed)) or "none"
                problems.append(Problem(settings.position, f"plugin {name!r} is not installed (installed: {known})"))
                continue
            if plugin.load() is None:
                problems.append(Problem(settings.position, f"plugin {name!r} failed to load: {plugin.load_error}"))
                continue
            if name in self.enabled:
                continue
            error = self._register(plugin)
            if error:
                problems.append(Problem(settings.position, f"plugin {name!r} is invalid: {error}"))
                continue
            plugin.hook_timeout = settings.duration(HOOK_TIMEOUT_KEY)
            plugin.settings = settings
            if "supervisor_configure" in self._hook_names(name):
                impl = self._impl("supervisor_configure", name)
                kwargs = {"settings": settings, "config": config}
                try:
                    result = impl.function(*[kwargs[a] for a in impl.argnames])
                except Exception as exc:
                    problems.append(
                        Problem(
                            settings.position,
                            f"plugin {name!r} failed to read its settings: {type(exc).__name__}: {exc}",
                        )
                    )
                    continue
                plugin.settings = settings if result is None else result
            problems.extend(settings.problems)
            self.enabled[name] = plugin
        # Sections problems may be shared between plugins' Settings objects;
        # report each once.
        unique = list(dict.fromkeys(problems))
        if unique:
            raise ConfigError(unique)

    def _hook_names(self, plugin_name: str) -> list[str]:
        plugin = self.manager.get_plugin(plugin_name)
        callers = self.manager.get_hookcallers(plugin) or []
        return [caller.name for caller in callers]

    def _impl(self, hook_name: str, plugin_name: str) -> pluggy.HookImpl:
        caller: pluggy.HookCaller = getattr(self.manager.hook, hook_name)
        return next(i for i in caller.get_hookimpls() if i.plugin_name == plugin_name)

    def add_commands(self, subparsers: argparse._SubParsersAction[Any]) -> None:
        """Subcommands from every installed plugin (enabled or not)."""
        for plugin in self.installed.values():
            function = getattr(plugin.load(), "supervisor_add_commands", None)
            if function is None or self._register(plugin):
                continue
            try:
                function(subparsers=subparsers)
            except Exception as exc:
                log.warning("plugin %s failed to add its commands: %s", plugin.name, exc)

    # ------------------------------------------------------------------
    # Introspection (supervisor plugins / supervisor check)
    # ------------------------------------------------------------------

    def hooks_by_phase(self) -> dict[str, list[str]]:
        """Enabled plugins per shutdown phase, for ``supervisor check``."""
        phases: dict[str, list[str]] = {}
        for name in self.enabled:
            for hook_name in self._hook_names(name):
                phase = hook_name.removeprefix("supervisor_")
                phases.setdefault(phase, []).append(name)
        return phases

    def describe(self) -> list[str]:
        lines = []
        for plugin in sorted(self.installed.values(), key=lambda p: p.name):
            lines.append(f"{plugin.name}  ({plugin.distribution})")
            if plugin.load() is None:
                lines.append(f"    failed to load: {plugin.load_error}")
                continue
            error = self._register(plugin)
            if error:
                lines.append(f"    invalid: {error}")
                continue
            hooks = ", ".join(h.removeprefix("supervisor_") for h in self._hook_names(plugin.name))
            lines.append(f"    hooks: {hooks or '-'}")
            doc = inspect.getdoc(plugin.obj) or ""
            lines.extend(f"    {line}" if line else "" for line in doc.splitlines())
            lines.append("")
        return lines

    # ------------------------------------------------------------------
    # Running hooks
    # ------------------------------------------------------------------

    def bind(
        self,
        config: Config,
        processes: Mapping[str, ProcessInfo],
        timeline: Timeline,
        main_exited: trio.Event,
        board: Board | None = None,
    ) -> None:
        """Create each enabled plugin's Context, once the processes exist;
        ``board`` takes what plugins report (``ctx.report_health``)."""
        for name, plugin in self.enabled.items():
            self.contexts[name] = Context(
                plugin=name,
                settings=plugin.settings,
                config=config,
                log=logging.getLogger(f"supervisor.plugin.{name}"),
                processes=processes,
                timeline=timeline,
                main_exited=main_exited,
                board=board,
            )

    def implementations(self, hook_name: str) -> list[pluggy.HookImpl]:
        caller: pluggy.HookCaller = getattr(self.manager.hook, hook_name)
        return [i for i in reversed(caller.get_hookimpls()) if i.plugin_name in self.contexts]

    async def call(
        self,
        hook_name: str,
        *,
        deadline: Deadline | None = None,
        phase: str | None = None,
        step_name: str | None = None,
        **kwargs: Any,
    ) -> None:
        """Run every implementation of ``hook_name`` concurrently and wait for all.

        With a ``deadline`` each runs until the deadline less its reserve;
        with ``phase`` each call is recorded in the timeline.  Never raises
        (but for trio.Cancelled from an outer scope).
        """
        impls = self.implementations(hook_name)
        if not impls:
            return
        async with trio.open_nursery() as nursery:
            for impl in impls:
                nursery.start_soon(self._run_one, hook_name, impl, deadline, phase, step_name, kwargs)

    def start_soon(self, nursery: trio.Nursery, hook_name: str, **kwargs: Any) -> None:
        """Fire-and-forget, for process events: each implementation runs in
        ``nursery`` bounded by its hook timeout."""
        for impl in self.implementations(hook_name):
            nursery.start_soon(self._run_one, hook_name, impl, None, None, None, kwargs)

    async def _run_one(
        self,
        hook_name: str,
        impl: pluggy.HookImpl,
        deadline: Deadline | None,
        phase: str | None,
        step_name: str | None,
        kwargs: dict[str, Any],
    ) -> None:
        plugin = self.enabled[impl.plugin_name]
        ctx = self.contexts[impl.plugin_name]
        arguments = {"ctx": ctx, "deadline": deadline, **kwargs}
        # A background task runs until the shutdown cancels it: no timeout,
        # whatever the plugin's hook_timeout says about its other hooks.
        timeout = math.inf if hook_name == "supervisor_background" else plugin.hook_timeout
        if timeout is None:
            timeout = math.inf if deadline is not None else _DEFAULT_EVENT_TIMEOUT
        call: Callable[..., Any] = impl.function
        name = step_name or hook_name.removeprefix("supervisor_")
        if phase is None:
            await self._guarded(plugin.name, hook_name, call, arguments, impl.argnames, deadline, timeout, None)
            return
        with ctx.timeline.step(phase, name, plugin=plugin.name) as step:
            step.outcome = await self._guarded(
                plugin.name, hook_name, call, arguments, impl.argnames, deadline, timeout, step
            )
        if step.outcome == SKIPPED:
            ctx.timeline.discard(step)

    async def _guarded(
        self,
        plugin_name: str,
        hook_name: str,
        call: Callable[..., Any],
        arguments: dict[str, Any],
        argnames: tuple[str, ...],
        deadline: Deadline | None,
        timeout: float,
        step: Any,
    ) -> str:
        """Run one implementation; return its outcome word."""
        hook_log = logging.getLogger(f"supervisor.plugin.{plugin_name}")
        scope_cm: AbstractContextManager[trio.CancelScope] = (
            deadline.scope(timeout=timeout) if deadline is not None else trio.move_on_after(timeout)
        )
        result: object = None
        with scope_cm as scope:
            try:
                result = await _invoke(call, [arguments[a] for a in argnames])
            except Exception as exc:
                hook_log.error("%s failed: %s: %s", hook_name, type(exc).__name__, exc, exc_info=exc)
                if step is not None:
                    step.detail = f"{type(exc).__name__}: {exc}"
                return "error"
        if scope.cancelled_caught:
            if deadline is not None and deadline.expired:
                hook_log.warning("%s cut short: the shutdown deadline leaves no more time", hook_name)
                return "cancelled"
            if deadline is not None and deadline.remaining() <= deadline.reserve + 1e-9:
                hook_log.warning(
                    "%s cut short to keep %.3fs in reserve for stopping processes", hook_name, deadline.reserve
                )
            else:
                hook_log.warning("%s timed out", hook_name)
            return "timeout"
        return SKIPPED if result is SKIP else "ok"
