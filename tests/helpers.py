"""Pieces of the supervisor built the way only tests need them."""

from __future__ import annotations

from supervisor._pluginhost import PluginHost, Registry

__all__ = ["empty_host"]


def empty_host() -> PluginHost:
    """A plugin host with no plugin installed: a test adds its own with
    ``add`` (the command line's host discovers the installed ones)."""
    return PluginHost(Registry())
