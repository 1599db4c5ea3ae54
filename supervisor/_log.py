"""One line per event, as text or JSON, from both processes of the supervisor.

Stdlib only and nothing heavy: the init layer logs before (and after) the
orchestrator runs, and every import here is start-up time of PID 1 — so no
``logging`` and no ``json`` until they are needed.  The orchestrator plugs the
same formatting into the ``logging`` module (``supervisor/_logging.py``) so
that plugins can use ordinary loggers.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any, TextIO

__all__ = ["DEBUG", "ERROR", "INFO", "WARNING", "LogSettings", "format_record", "write"]

# The values of logging's levels, so both sides compare alike.
DEBUG, INFO, WARNING, ERROR = 10, 20, 30, 40
_LEVELS = {"debug": DEBUG, "info": INFO, "warning": WARNING, "error": ERROR}
_NAMES = {DEBUG: "DEBUG", INFO: "INFO", WARNING: "WARNING", ERROR: "ERROR", 50: "CRITICAL"}


class LogSettings:
    """Format and threshold, shared by the init layer and the orchestrator."""

    def __init__(self, fmt: str = "text", level: str = "info") -> None:
        self.format = fmt
        self.level = _LEVELS.get(level, INFO)
        self.silenced = False

    @classmethod
    def from_environment(cls) -> LogSettings:
        return cls(
            os.environ.get("SUPERVISOR_LOG_FORMAT", "text"),
            os.environ.get("SUPERVISOR_LOG_LEVEL", "info"),
        )


def format_record(fmt: str, level: int, logger: str, message: str, fields: dict[str, Any]) -> str:
    """Render one event.  Text keeps the fields as ``key=value`` after the
    message, JSON puts them beside it; both stay on one line."""
    now = time.time()
    level_name = _NAMES.get(level, str(level))
    if fmt == "json":
        import json

        record = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now % 1 * 1000):03d}Z",
            "level": level_name.lower(),
            "logger": logger,
            "message": message,
        }
        record.update(fields)
        return json.dumps(record, default=str)
    stamp = time.strftime("%H:%M:%S", time.localtime(now)) + f".{int(now % 1 * 1000):03d}"
    extra = "".join(f" {k}={_text_value(v)}" for k, v in fields.items())
    name = logger.removeprefix("supervisor").lstrip(".") or "supervisor"
    return f"{stamp} {level_name:<7} [{name}] {message}{extra}"


def _text_value(value: Any) -> str:
    text = str(value)
    return repr(text) if (" " in text or not text) else text


def write(
    settings: LogSettings, level: int, logger: str, message: str, fields: dict[str, Any], stream: TextIO | None = None
) -> None:
    """Log from the init layer (no `logging` machinery there)."""
    if level < settings.level or settings.silenced:
        return
    out = stream or sys.stderr
    try:
        out.write(format_record(settings.format, level, logger, message, fields) + "\n")
        out.flush()
    except (OSError, ValueError):
        # A closed stderr must never take PID 1 down, nor make it retry
        # (and raise SIGPIPE) for every later line.
        settings.silenced = True
