"""What the host can say about its plugins without running a hook:
``supervisor plugins`` (every installed one) and the hooks per phase in
``supervisor check``'s plan (the enabled ones)."""

from __future__ import annotations

import inspect
from collections.abc import Iterable

from ._registry import Registry

__all__ = ["describe", "hooks_by_phase"]


def hooks_by_phase(registry: Registry, enabled: Iterable[str]) -> dict[str, list[str]]:
    """The enabled plugins implementing each hook, by the hook's phase name."""
    phases: dict[str, list[str]] = {}
    for name in enabled:
        for hook_name in registry.hook_names(name):
            phases.setdefault(hook_name.removeprefix("supervisor_"), []).append(name)
    return phases


def describe(registry: Registry) -> list[str]:
    """Lines for ``supervisor plugins``: each installed plugin with its
    distribution, then why it is unusable, or its hooks and its docstring
    (where plugins document their settings)."""
    lines = []
    for plugin in sorted(registry.installed.values(), key=lambda p: p.name):
        lines.append(f"{plugin.name}  ({plugin.distribution})")
        if plugin.load() is None:
            lines.append(f"    failed to load: {plugin.load_error}")
            continue
        error = registry.register(plugin)
        if error:
            lines.append(f"    invalid: {error}")
            continue
        hooks = ", ".join(h.removeprefix("supervisor_") for h in registry.hook_names(plugin.name))
        lines.append(f"    hooks: {hooks or '-'}")
        doc = inspect.getdoc(plugin.obj) or ""
        lines.extend(f"    {line}" if line else "" for line in doc.splitlines())
        lines.append("")
    return lines
