"""The configuration layer: YAML with positions to a validated, immutable ``Config``.

``load_config`` reads and checks a file and reports every problem at once
(``ConfigError``); ``Settings`` is how plugins read their own sections;
``start_levels``, ``budget_problems`` and ``render_plan`` serve the
orchestrator and ``supervisor check``.

``effective_config``, ``plain_settings`` and ``render_plan`` are loaded on
first use: ``supervisor check`` and a re-plan need them, a running
supervisor's memory does not.
"""

from typing import TYPE_CHECKING, Any

from ._errors import ConfigError, Problem
from ._load import load_config
from ._model import (
    Backoff,
    Capabilities,
    Config,
    ControlSettings,
    HealthCheck,
    HealthSettings,
    ProcessSpec,
    ReadyCheck,
)
from ._order import budget_problems, start_levels, stop_levels
from ._position import Position
from ._settings import HOOK_TIMEOUT_KEY, Settings

if TYPE_CHECKING:
    from ._effective import effective_config as effective_config
    from ._effective import plain_settings as plain_settings
    from ._render import render_plan as render_plan

__all__ = [
    "HOOK_TIMEOUT_KEY",
    "Backoff",
    "Capabilities",
    "Config",
    "ConfigError",
    "ControlSettings",
    "HealthCheck",
    "HealthSettings",
    "Position",
    "Problem",
    "ProcessSpec",
    "ReadyCheck",
    "Settings",
    "budget_problems",
    "effective_config",
    "load_config",
    "plain_settings",
    "render_plan",
    "start_levels",
    "stop_levels",
]


def __getattr__(name: str) -> Any:
    if name in ("effective_config", "plain_settings"):
        from . import _effective

        return getattr(_effective, name)
    if name == "render_plan":
        from ._render import render_plan

        return render_plan
    raise AttributeError(f"module 'supervisor.config' has no attribute {name!r}")
