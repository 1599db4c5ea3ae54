"""The plugin host: the one object the command line builds for plugins.

Its jobs live in modules of their own, as pytest keeps its plugin manager
apart from its hook callers: ``_registry`` (discovery, registration and what
the host refuses), ``_enable`` (each plugin's settings), ``_commands`` (CLI
subcommands from plugins), ``_introspect`` (``supervisor plugins`` and the
hooks in ``supervisor check``'s plan) and ``_dispatch`` (calling hooks under
deadlines and timeouts, recording the timeline).  ``PluginHost`` only ties
them together and is the ``HookRunner`` the orchestrator and the plan call.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pluggy
import trio

from .._hooks import Binding, HookCall, HookRunner
from ..config import Config
from ._commands import add_commands
from ._dispatch import Dispatcher
from ._enable import EnabledPlugin, enable
from ._introspect import describe, hooks_by_phase
from ._registry import ENTRY_POINT_GROUP, InstalledPlugin, Registry

if TYPE_CHECKING:
    import argparse  # the command line's, not the orchestrator's: annotations only

__all__ = ["ENTRY_POINT_GROUP", "EnabledPlugin", "InstalledPlugin", "PluginHost", "Registry"]


class PluginHost(HookRunner):
    """Installed plugins → enabled ones (with settings) → hooks dispatched."""

    def __init__(self, registry: Registry) -> None:
        self.registry = registry
        self.enabled: dict[str, EnabledPlugin] = {}
        self.dispatcher = Dispatcher(registry, self.enabled)

    @classmethod
    def discover(cls) -> PluginHost:
        """Every plugin of the entry-point group, each imported only when
        used (enabled, listed, asked for its commands), each on its own: one
        that fails to import is reported if the configuration enables it,
        and the others still load."""
        return cls(Registry.discover())

    def add(self, name: str, obj: object) -> None:
        """Make a plugin object available without an entry point (embedding, tests)."""
        self.registry.add(name, obj)

    def enable(self, config: Config) -> None:
        """Enable the plugins named in ``config.plugins``, each reading its
        own section.  Raises ConfigError with every problem found."""
        enable(self.registry, config, self.enabled)

    def add_commands(self, subparsers: argparse._SubParsersAction[Any]) -> None:
        """Subcommands from every installed plugin (enabled or not)."""
        add_commands(self.registry, subparsers)

    def hooks_by_phase(self) -> dict[str, list[str]]:
        """Enabled plugins per hook, for ``supervisor check``."""
        return hooks_by_phase(self.registry, self.enabled)

    def describe(self) -> list[str]:
        """Lines for ``supervisor plugins``."""
        return describe(self.registry)

    # HookRunner: what the orchestrator and the plan call.

    def bound(self, binding: Binding) -> None:
        self.dispatcher.bind(binding)

    def implementations(self, hook_name: str) -> list[pluggy.HookImpl]:
        return self.dispatcher.implementations(hook_name)

    async def run(self, call: HookCall) -> None:
        await self.dispatcher.run(call)

    def spawn(self, nursery: trio.Nursery, call: HookCall) -> None:
        self.dispatcher.spawn(nursery, call)
