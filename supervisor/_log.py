"""One line per event, as text or JSON, from both processes of the supervisor.

Stdlib only and nothing heavy: the init layer logs before (and after) the
orchestrator runs, and every import here is start-up time of PID 1 — so no
``logging`` and no ``json`` until they are needed.  The orchestrator plugs the
same formatting into the ``logging`` module (``supervisor/_logging.py``) so
that plugins can use ordinary loggers.
"""

from __future__ import annotations

import os
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

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


def write(settings: LogSettings, level: int, logger: str, message: str, fields: dict[str, Any]) -> None:
    """Log from the init layer (no `logging` machinery there): to stderr,
    without ever blocking (see ``_NonBlockingStderr``)."""
    if level < settings.level or settings.silenced:
        return
    line = format_record(settings.format, level, logger, message, fields) + "\n"
    try:
        _STDERR.write(line.encode(errors="backslashreplace"))
    except (OSError, ValueError):
        # A closed stderr must never take PID 1 down, nor make it retry
        # (and raise SIGPIPE) for every later line.
        settings.silenced = True


class _NonBlockingStderr:
    """PID 1's log writes must not block: a stalled log collector would stop
    it from enforcing the wall.  ``O_NONBLOCK`` on fd 2 itself would change
    the open file description every child shares, so for a pipe, FIFO or
    terminal the layer opens its own description of the same object through
    /proc/self/fd/2 and makes that one non-blocking; a socket gets
    ``MSG_DONTWAIT``; a regular file (or /dev/null) never blocks anyway.  A
    line that does not fit is dropped and counted, and the count is written
    with the next line that does."""

    def __init__(self) -> None:
        self._fd: int | None = None
        self._socket: Any = None
        self._ready = False
        self.dropped = 0

    def _open(self) -> None:
        import stat

        self._ready = True
        mode = os.fstat(2).st_mode
        if stat.S_ISREG(mode) or (stat.S_ISCHR(mode) and not os.isatty(2)):
            self._fd = 2
        elif stat.S_ISSOCK(mode):
            import socket

            self._socket = socket.socket(fileno=os.dup(2))
        else:
            flags = os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY
            try:
                self._fd = os.open("/proc/self/fd/2", flags)
            except OSError:
                self._fd = 2  # no /proc: the old way, better than silence

    def write(self, data: bytes) -> None:
        if not self._ready:
            self._open()
        if self.dropped:
            data = f"supervisor: {self.dropped} log line(s) dropped: stderr was not being read\n".encode() + data
        try:
            if self._socket is not None:
                import socket

                self._socket.send(data, socket.MSG_DONTWAIT)
            elif self._fd is not None:
                os.write(self._fd, data)
        except BlockingIOError:
            self.dropped += 1
            return
        self.dropped = 0


_STDERR = _NonBlockingStderr()
