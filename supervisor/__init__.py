"""pid1-supervisor: a PID 1 for Kubernetes pods.

The public API, for plugin authors and embedders, is what this module exports.
It is loaded lazily: the console script imports this package before the init
layer has blocked signals, and a SIGTERM must not be lost while trio and
pluggy are importing (see ``supervisor._main``).
"""

from __future__ import annotations

# Not `typing.TYPE_CHECKING`: the console script imports this package first,
# and PID 1 imports nothing the Python floor does not (docs/architecture.md).
TYPE_CHECKING = False

__version__ = "0.1.0"

# The public API: each name and the module it is defined in, the one list.
# ``__all__``, ``dir()`` and the lazy loader below are made from it.  Type
# checkers cannot run the loader, so the block under TYPE_CHECKING spells the
# same imports for them; tests/core/test_exports.py reads that block and fails
# when it and this list differ.  Adding a name: one entry here, one import
# there.
_EXPORTS = {
    "hookimpl": ".hookspec",
    "SKIP": ".hookspec",
    "HookFailed": ".hookspec",
    "PHASES": ".phases",
    "PROCESS_PHASES": ".phases",
    "Phase": ".phases",
    "PhaseEntry": ".phases",
    "PhasePlugin": ".phases",
    "entries_for": ".phases",
    "plan_entries": ".phases",
    "read_entries": ".phases",
    "read_phase": ".phases",
    "run_each": ".phases",
    "Context": "._context",
    "ProcessInfo": "._context",
    "ProcessState": ".runtime.state",
    "Deadline": "._deadline",
    "HttpRequest": "._http",
    "HttpResponse": "._http",
    "http_url_problem": "._redact",
    "redact_url": "._redact",
    "why_cancelled": "._cancelled",
    "ExitStatus": "._status",
    "Step": "._timeline",
    "Timeline": "._timeline",
    "format_duration": "._units",
    "parse_duration": "._units",
    "Config": ".config",
    "ConfigError": ".config",
    "Position": ".config",
    "ProcessSpec": ".config",
    "Settings": ".config",
}

if TYPE_CHECKING:
    from ._cancelled import why_cancelled as why_cancelled
    from ._context import Context as Context
    from ._context import ProcessInfo as ProcessInfo
    from ._deadline import Deadline as Deadline
    from ._http import HttpRequest as HttpRequest
    from ._http import HttpResponse as HttpResponse
    from ._redact import http_url_problem as http_url_problem
    from ._redact import redact_url as redact_url
    from ._status import ExitStatus as ExitStatus
    from ._timeline import Step as Step
    from ._timeline import Timeline as Timeline
    from ._units import format_duration as format_duration
    from ._units import parse_duration as parse_duration
    from .config import Config as Config
    from .config import ConfigError as ConfigError
    from .config import Position as Position
    from .config import ProcessSpec as ProcessSpec
    from .config import Settings as Settings
    from .hookspec import SKIP as SKIP
    from .hookspec import HookFailed as HookFailed
    from .hookspec import hookimpl as hookimpl
    from .phases import PHASES as PHASES
    from .phases import PROCESS_PHASES as PROCESS_PHASES
    from .phases import Phase as Phase
    from .phases import PhaseEntry as PhaseEntry
    from .phases import PhasePlugin as PhasePlugin
    from .phases import entries_for as entries_for
    from .phases import plan_entries as plan_entries
    from .phases import read_entries as read_entries
    from .phases import read_phase as read_phase
    from .phases import run_each as run_each
    from .runtime.state import ProcessState as ProcessState

__all__ = ["__version__"]
__all__.extend(_EXPORTS)


if not TYPE_CHECKING:
    # Only at run time: to a type checker a module ``__getattr__`` would make
    # every attribute exist (as Any), so that ``from supervisor import
    # Deadlin`` passed; without it, the imports above are all there is.

    def __getattr__(name: str) -> object:
        # PEP 562: the first access imports the defining module; the value is
        # then cached in the module's globals, so later ones skip this.
        try:
            module = _EXPORTS[name]
        except KeyError:
            raise AttributeError(f"module 'supervisor' has no attribute {name!r}") from None
        import importlib

        value = getattr(importlib.import_module(module, __name__), name)
        globals()[name] = value
        return value


def __dir__() -> list[str]:
    return sorted(__all__)
