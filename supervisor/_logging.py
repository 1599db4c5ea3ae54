"""The orchestrator's logging: the ``supervisor`` logger tree, plugins
included, in the same one-line text or JSON format as the init layer."""

from __future__ import annotations

import logging
import sys

from ._log import LogSettings, format_record

__all__ = ["configure_logging"]


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
