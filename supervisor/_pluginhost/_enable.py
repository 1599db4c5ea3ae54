"""Enabling plugins: each section of ``plugins:`` checked by its plugin.

Every problem of every plugin is collected before anything is reported, so
that a deployment with three mistakes in three plugins' sections takes one
run of ``supervisor check`` to fix, not three; each is one line at the
place in the YAML it is about.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..config import HOOK_TIMEOUT_KEY, Config, ConfigError, Problem, Settings
from ._registry import Registry

__all__ = ["EnabledPlugin", "enable"]


@dataclass(frozen=True)
class EnabledPlugin:
    """A plugin the configuration names, with what it made of its section."""

    name: str
    settings: object
    """What its ``supervisor_configure`` returned (the Settings if None)."""
    hook_timeout: float | None
    """The section's ``hook_timeout``: None when not set."""


def enable(registry: Registry, config: Config, enabled: dict[str, EnabledPlugin]) -> None:
    """Add the plugins named in ``config.plugins`` to ``enabled``, each
    having read its own section.  Raises ConfigError with every problem."""
    problems: list[Problem] = []
    for name, settings in config.plugins.items():
        assert isinstance(settings, Settings)
        if name in enabled:
            continue
        problem = _enable_one(registry, name, settings, config, enabled)
        if problem is not None:
            problems.append(Problem(settings.position, problem))
            continue
        problems.extend(settings.problems)
    # Nested sections share their parent's problem list, so a problem may
    # come twice; report each once.
    unique = list(dict.fromkeys(problems))
    if unique:
        raise ConfigError(unique)


def _enable_one(
    registry: Registry, name: str, settings: Settings, config: Config, enabled: dict[str, EnabledPlugin]
) -> str | None:
    """Load, register and configure one plugin; returns the problem that
    stops it (at its section), or None once it is in ``enabled``."""
    plugin = registry.installed.get(name)
    if plugin is None:
        known = ", ".join(sorted(registry.installed)) or "none"
        return f"plugin {name!r} is not installed (installed: {known})"
    if plugin.load() is None:
        return f"plugin {name!r} failed to load: {plugin.load_error}"
    error = registry.register(plugin)
    if error:
        return f"plugin {name!r} is invalid: {error}"
    hook_timeout = settings.duration(HOOK_TIMEOUT_KEY)
    parsed: object = settings
    if "supervisor_configure" in registry.hook_names(name):
        impl = registry.impl("supervisor_configure", name)
        arguments = {"settings": settings, "config": config}
        try:
            result = impl.function(*[arguments[a] for a in impl.argnames])
        except Exception as exc:
            return f"plugin {name!r} failed to read its settings: {type(exc).__name__}: {exc}"
        parsed = settings if result is None else result
    enabled[name] = EnabledPlugin(name, parsed, hook_timeout)
    return None
