"""The orchestrator's logging: the ``supervisor`` logger tree, plugins
included, in the same one-line text or JSON format as the init layer."""

from __future__ import annotations

import logging

from ._log import WARNING, LogSettings, format_record
from .runtime.output import OutputWriter, stderr_writer, stdout_writer

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


class _WriterHandler(logging.Handler):
    """Records to an OutputWriter: a stuck stderr costs log lines (counted and
    reported once it drains), never a blocked event loop."""

    def __init__(self, writer: OutputWriter) -> None:
        super().__init__()
        self.writer = writer

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = self.format(record) + "\n"
        except Exception:
            self.handleError(record)
            return
        self.writer.write(line.encode(errors="backslashreplace"))


def configure_logging(settings: LogSettings) -> logging.Logger:
    """Route the ``supervisor`` logger tree (plugins included) to stderr."""
    root = logging.getLogger("supervisor")
    root.handlers.clear()
    writer = stderr_writer()

    def notice(dropped: int, stream: str) -> bytes:
        message = f"{dropped} line(s) of output dropped: {stream} was not being read"
        fields = {"dropped": dropped, "stream": stream}
        return (format_record(settings.format, WARNING, "supervisor.output", message, fields) + "\n").encode()

    writer.notice = notice
    stdout_writer().notice = notice
    handler = _WriterHandler(writer)
    handler.setFormatter(_Formatter(settings.format))
    root.addHandler(handler)
    root.setLevel(settings.level)
    root.propagate = False
    return root
