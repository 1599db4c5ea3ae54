"""One line per event, as text or JSON, from both processes of the supervisor.

Stdlib only: the init layer logs before (and after) the orchestrator runs and
must not import anything heavy.  The orchestrator plugs the same formatting
into the `logging` module so that plugins can use ordinary loggers.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from typing import Any, TextIO

__all__ = ["LogSettings", "configure_logging", "format_record", "write"]

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}


class LogSettings:
    """Format and threshold, shared by the init layer and the orchestrator."""

    def __init__(self, fmt: str = "text", level: str = "info") -> None:
        self.format = fmt
        self.level = _LEVELS.get(level, logging.INFO)
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
    if fmt == "json":
        record = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now % 1 * 1000):03d}Z",
            "level": logging.getLevelName(level).lower(),
            "logger": logger,
            "message": message,
        }
        record.update(fields)
        return json.dumps(record, default=str)
    stamp = time.strftime("%H:%M:%S", time.localtime(now)) + f".{int(now % 1 * 1000):03d}"
    extra = "".join(f" {k}={_text_value(v)}" for k, v in fields.items())
    name = logger.removeprefix("supervisor").lstrip(".") or "supervisor"
    return f"{stamp} {logging.getLevelName(level):<7} [{name}] {message}{extra}"


def _text_value(value: Any) -> str:
    text = str(value)
    return json.dumps(text) if (" " in text or not text) else text


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


class _Formatter(logging.Formatter):
    def __init__(self, fmt: str) -> None:
        super().__init__()
        self._fmt_name = fmt

    def format(self, record: logging.LogRecord) -> str:
        fields = dict(getattr(record, "fields", {}))
        message = record.getMessage()
        if record.exc_info and record.levelno >= logging.ERROR and self._fmt_name == "json":
            fields["exception"] = self.formatException(record.exc_info)
        elif record.exc_info:
            message += " | " + self.formatException(record.exc_info).replace("\n", " | ")
        return format_record(self._fmt_name, record.levelno, record.name, message, fields)


def configure_logging(settings: LogSettings) -> logging.Logger:
    """Route the ``supervisor`` logger tree (plugins included) to stderr."""
    root = logging.getLogger("supervisor")
    root.handlers.clear()
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_Formatter(settings.format))
    root.addHandler(handler)
    root.setLevel(settings.level)
    root.propagate = False
    return root
