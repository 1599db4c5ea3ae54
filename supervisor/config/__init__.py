"""The configuration layer: YAML with positions to a validated, immutable ``Config``.

``load_config`` reads and checks a file and reports every problem at once
(``ConfigError``); ``Settings`` is how plugins read their own sections;
``start_levels``, ``budget_problems`` and ``render_plan`` serve the
orchestrator and ``supervisor check``.
"""

from ._effective import effective_config, plain_settings
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
from ._render import render_plan
from ._settings import HOOK_TIMEOUT_KEY, Settings

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
