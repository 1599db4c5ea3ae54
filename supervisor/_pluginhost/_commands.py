"""Subcommands that plugins add to the ``supervisor`` command line.

Asked of every installed plugin, enabled or not: an operator's tool (say,
``supervisor libvirt-guests``) is useful in a container whose YAML does not
enable the plugin, and the command line is built before any YAML is read.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from ._registry import Registry

if TYPE_CHECKING:
    import argparse  # the command line's, not the orchestrator's: annotations only

__all__ = ["add_commands"]

log = logging.getLogger("supervisor.plugins")


def add_commands(registry: Registry, subparsers: argparse._SubParsersAction[Any]) -> None:
    """Let each installed plugin that implements ``supervisor_add_commands``
    add its parsers; one that fails to load, is invalid or raises is left
    out (``supervisor plugins`` says why) and the others still get theirs."""
    for plugin in registry.installed.values():
        if getattr(plugin.load(), "supervisor_add_commands", None) is None or registry.register(plugin):
            continue
        # Through pluggy's record of the implementation rather than the
        # attribute: the attribute may be an unmarked function of that name.
        if "supervisor_add_commands" not in registry.hook_names(plugin.name):
            continue
        try:
            registry.impl("supervisor_add_commands", plugin.name).function(subparsers=subparsers)
        except Exception as exc:
            log.warning("plugin %s failed to add its commands: %s", plugin.name, exc)
