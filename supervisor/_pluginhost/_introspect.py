"""What the host can say about its plugins without running a hook:
``supervisor plugins`` (every installed one) and the hooks per phase in
``supervisor check``'s plan (the enabled ones)."""

from __future__ import annotations

import ast
import inspect
import sys
from collections.abc import Mapping

from ..phases import PHASES
from ._enable import EnabledPlugin
from ._registry import InstalledPlugin, Registry

__all__ = ["describe", "hooks_by_phase"]


def hooks_by_phase(registry: Registry, enabled: Mapping[str, EnabledPlugin]) -> dict[str, list[str]]:
    """The enabled plugins that will act in each phase, by the phase's name
    (``before_process_stop:NAME`` for one process): ``name`` or, where the
    plugin's settings say what it does there, ``name (what)``.

    A plugin whose settings have ``plan()`` (see ``supervisor_configure``)
    is listed where that says; any other under every hook it implements.
    """
    phases: dict[str, list[str]] = {}
    for name, plugin in enabled.items():
        implemented = [hook.removeprefix("supervisor_") for hook in registry.hook_names(name)]
        plan = _plan_of(plugin.settings)
        if plan is None:
            for phase in implemented:
                phases.setdefault(phase, []).append(name)
            continue
        # Hooks outside the shutdown and start-up phases (events, background,
        # configure) are listed as implemented: a plan names phases only.
        for phase in implemented:
            if phase not in PHASES:
                phases.setdefault(phase, []).append(name)
        for phase, what in plan.items():
            if phase.partition(":")[0] in implemented:
                phases.setdefault(phase, []).append(f"{name} ({what})" if what else name)
    return phases


def _plan_of(settings: object) -> Mapping[str, str] | None:
    plan = getattr(settings, "plan", None)
    if not callable(plan):
        return None
    result = plan()
    return result if isinstance(result, Mapping) else None


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
        doc = _docstring(plugin)
        lines.extend(f"    {line}" if line else "" for line in doc.splitlines())
        lines.append("")
    return lines


def _docstring(plugin: InstalledPlugin) -> str:
    """The plugin's docstring, cleaned as ``inspect.getdoc`` does.

    The image runs the supervisor with ``python -OO``, which drops every
    docstring from the compiled code; this command then reads the one the
    source starts with: the object's own (a module, a class, a function), a
    plugin instance's class's when the class is the plugin module's, else
    that module's (a ``PhasePlugin`` made with ``doc=__doc__``).
    """
    doc = inspect.getdoc(plugin.obj)
    if doc or sys.flags.optimize < 2:
        return doc or ""
    obj = plugin.obj
    if not (inspect.ismodule(obj) or inspect.isclass(obj) or inspect.isfunction(obj)):
        module = plugin.entry_point.module if plugin.entry_point is not None else None
        own_class = module is None or type(obj).__module__ == module
        obj = type(obj) if own_class else sys.modules.get(module or "")
    return _source_docstring(obj) if obj is not None else ""


def _source_docstring(obj: object) -> str:
    try:
        tree = ast.parse(inspect.cleandoc("\n" + inspect.getsource(obj)))  # type: ignore[arg-type]
    except (OSError, TypeError, SyntaxError):
        return ""  # no source to read: no docstring, as -OO left it
    node = tree if inspect.ismodule(obj) else tree.body[0]
    if not isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
        return ""
    return ast.get_docstring(node) or ""
