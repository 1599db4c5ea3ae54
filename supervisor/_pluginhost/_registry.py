"""Discovery and registration: which plugins exist, and which are acceptable.

Discovery finds the entry points of the group without importing them:
``supervisor plugins`` and a configuration naming two plugins must not pay
for (or be broken by) the ten others installed beside them.  Registration
hands one plugin to pluggy, which checks each implementation against its
specification (names, arguments), and then checks what pluggy allows but
this host's dispatch cannot honour, so that a plugin relying on it is told
at once instead of silently misbehaving during a shutdown.
"""

from __future__ import annotations

import importlib.metadata
import inspect
import logging
from dataclasses import dataclass, field

import pluggy

from .. import hookspec

__all__ = ["ENTRY_POINT_GROUP", "InstalledPlugin", "Registry"]

ENTRY_POINT_GROUP = "supervisor.plugins"

# Called directly, once per plugin, while the configuration is read or the
# command line is built: there is no event loop to await them on yet.
_PLAIN_HOOKS = frozenset({"supervisor_configure", "supervisor_add_commands"})

# pluggy's call order (tryfirst/trylast) is what the dispatch honours for
# hooks it calls in waves.  These hooks are not called that way: the two
# plain ones run per plugin in the order of the YAML or of the installed
# distributions, and background tasks all run side by side until the
# shutdown (a "first" one would never let the others start).
_UNORDERED_HOOKS = {
    "supervisor_configure": "each plugin's settings are read in the order of the YAML",
    "supervisor_add_commands": "each plugin adds its commands on its own",
    "supervisor_background": "background tasks all run side by side until the shutdown begins",
}

log = logging.getLogger("supervisor.plugins")


@dataclass
class InstalledPlugin:
    """A plugin found by discovery (or added directly), loaded on first use."""

    name: str
    distribution: str
    entry_point: importlib.metadata.EntryPoint | None = None
    obj: object | None = None
    load_error: str | None = None

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


def _manager() -> pluggy.PluginManager:
    manager = pluggy.PluginManager(hookspec.PROJECT)
    manager.add_hookspecs(hookspec)
    return manager


@dataclass
class Registry:
    """The installed plugins and the pluggy manager that knows their hooks."""

    manager: pluggy.PluginManager = field(default_factory=_manager)
    installed: dict[str, InstalledPlugin] = field(default_factory=dict)

    @classmethod
    def discover(cls) -> Registry:
        """Every entry point of the group, none imported yet.  A name two
        distributions claim goes to the first one found (the one earlier on
        ``sys.path``), as Python's own imports would have it."""
        registry = cls()
        for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
            dist = f"{ep.dist.name} {ep.dist.version}" if ep.dist else "?"
            registry.installed.setdefault(ep.name, InstalledPlugin(ep.name, dist, entry_point=ep))
        return registry

    def add(self, name: str, obj: object) -> None:
        """Make a plugin object available without an entry point (embedding, tests)."""
        self.installed[name] = InstalledPlugin(name, "(registered directly)", obj=obj)

    def register(self, plugin: InstalledPlugin) -> str | None:
        """Register a loaded plugin with pluggy, once; returns why it is
        invalid (and leaves it unregistered), or None."""
        if self.manager.is_registered(plugin.obj):
            return None
        try:
            self.manager.register(plugin.obj, name=plugin.name)
            self.manager.check_pending()
        except pluggy.PluginValidationError as exc:
            if plugin.obj is not None and self.manager.is_registered(plugin.obj):
                self.manager.unregister(plugin.obj)
            return str(exc)
        for hook_name in self.hook_names(plugin.name):
            problem = _unsupported(hook_name, self.impl(hook_name, plugin.name))
            if problem is not None:
                self.manager.unregister(plugin.obj)
                return f"{hook_name}: {problem}"
        return None

    def hook_names(self, plugin_name: str) -> list[str]:
        """The hooks a registered plugin implements."""
        callers = self.manager.get_hookcallers(self.manager.get_plugin(plugin_name)) or []
        return [caller.name for caller in callers]

    def impl(self, hook_name: str, plugin_name: str) -> pluggy.HookImpl:
        """A registered plugin's implementation of ``hook_name``."""
        return next(i for i in self.impls(hook_name) if i.plugin_name == plugin_name)

    def impls(self, hook_name: str) -> list[pluggy.HookImpl]:
        """Every registered implementation of ``hook_name``, in pluggy's call
        order: ``tryfirst`` ones first, ``trylast`` ones last."""
        caller: pluggy.HookCaller = getattr(self.manager.hook, hook_name)
        # pluggy keeps them in reverse call order (its own loop walks the
        # list backwards).
        return list(reversed(caller.get_hookimpls()))


def _unsupported(hook_name: str, impl: pluggy.HookImpl) -> str | None:
    """What pluggy accepted but this host cannot do for ``impl``."""
    if hook_name in _PLAIN_HOOKS and inspect.iscoroutinefunction(impl.function):
        return "must be a plain function, not async"
    # A wrapper surrounds the other implementations' calls; here they are
    # separate trio tasks with their own timeouts, with no call to surround.
    if impl.hookwrapper or impl.wrapper:
        return "hook wrappers are not supported (hooks may be async)"
    if (impl.tryfirst or impl.trylast) and hook_name in _UNORDERED_HOOKS:
        which = "tryfirst" if impl.tryfirst else "trylast"
        return f"{which} cannot apply: {_UNORDERED_HOOKS[hook_name]}"
    return None
