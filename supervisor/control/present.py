"""How the control commands' answers look to a person: log lines with their
time and stream, ``--since``, the status rows of some processes, colour.

Stdlib only, like the client.  Colour only on a terminal, and never when
``NO_COLOR`` is set to anything (https://no-color.org): piped into a file
or ``grep``, the output is plain text.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from typing import Any, TextIO

from .._units import parse_duration

__all__ = ["Colours", "format_log_line", "only_processes", "parse_since"]

_STYLES = {"red": "31", "green": "32", "yellow": "33", "dim": "2", "bold": "1", "cyan": "36"}
# The state column's colour: what needs a look stands out.
STATE_STYLES = {
    "running": "green",
    "failed": "red",
    "backoff": "yellow",
    "starting": "yellow",
    "stopping": "yellow",
    "pending": "dim",
    "stopped": "dim",
    "exited": "dim",
}


class Colours:
    """ANSI colours for ``stream``, or none at all."""

    def __init__(self, stream: TextIO) -> None:
        self.enabled = _isatty(stream) and not os.environ.get("NO_COLOR")

    def paint(self, text: str, style: str | None) -> str:
        if not self.enabled or style is None or not text:
            return text
        return f"\033[{_STYLES[style]}m{text}\033[0m"


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def parse_since(text: str, now: float | None = None) -> float:
    """Seconds since the epoch from ``10m`` (that long ago) or an ISO 8601
    time (``2026-05-01T12:00:00``, local unless it has an offset or ``Z``).
    ValueError says what is accepted."""
    now = time.time() if now is None else now
    try:
        return now - parse_duration(text)
    except ValueError:
        pass
    import datetime  # (here: `supervisor status` and `health` need none of it)

    try:
        moment = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(
            f"invalid --since {text!r}: use a duration (30s, 10m, 2h) or a time such as 2026-05-01T12:00:00Z"
        ) from None
    return moment.timestamp()


def format_log_line(message: dict[str, Any], *, many: bool, timestamps: bool, colours: Colours) -> str:
    """One ``logs`` line: ``[NAME] `` when several processes' lines mix;
    with ``timestamps``, first its time (UTC, as ``kubectl logs
    --timestamps``) and stream."""
    parts = []
    if timestamps:
        import datetime

        moment = datetime.datetime.fromtimestamp(float(message.get("time", 0.0)), datetime.UTC)
        parts.append(colours.paint(moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z", "dim"))
        stream = str(message.get("stream", ""))
        parts.append(colours.paint(f"{stream:<6}", "red" if stream == "stderr" else "dim"))
    if many:
        parts.append(colours.paint(f"[{message.get('process')}]", "cyan"))
    parts.append(str(message.get("line", "")))
    return " ".join(parts)


def json_line(message: dict[str, Any]) -> str:
    return json.dumps({key: message[key] for key in ("time", "process", "stream", "line") if key in message})


def only_processes(answer: dict[str, Any], names: Sequence[str]) -> dict[str, Any]:
    """The status ``answer`` with the rows of ``names`` only (all without
    names); ValueError for a name that is not there."""
    if not names:
        return answer
    rows = {row["name"]: row for row in answer.get("processes", [])}
    unknown = [name for name in names if name not in rows]
    if unknown:
        known = ", ".join(rows) or "none"
        raise ValueError(f"unknown process {unknown[0]!r} (processes: {known})")
    wanted = [rows[name] for name in dict.fromkeys(names)]
    checks = [check for check in answer.get("checks", []) if check.get("process") in names]
    return {**answer, "processes": wanted, "checks": checks}
