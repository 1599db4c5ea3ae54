"""The ``ready:`` section of a process: how its dependents know it is up."""

from __future__ import annotations

import ipaddress
from collections.abc import Callable

from .._redact import http_url_problem
from .._units import format_duration
from ._model import ReadyCheck, ReadyKind
from ._settings import Settings

__all__ = ["READY_KINDS", "parse_ready", "parse_target", "parse_tcp_address"]

READY_KINDS: tuple[ReadyKind, ...] = ("socket", "tcp", "http", "exec", "file", "after")
_DEFAULT = ReadyCheck(kind="after", target=0.0)


def parse_ready(section: Settings) -> ReadyCheck | None:
    """Validate ``{<kind>: target, timeout: .., interval: ..}``; None if invalid."""
    section.check_keys([*READY_KINDS, "timeout", "interval"])
    kinds = [kind for kind in READY_KINDS if kind in section]
    timeout = section.duration("timeout", _DEFAULT.timeout)
    interval = section.duration("interval", _DEFAULT.interval)
    if timeout <= 0:
        section.error("timeout", "must be greater than 0")
    if interval <= 0:
        section.error("interval", "must be greater than 0 (it is the pause between probes)")
    if not kinds:
        section.error(None, "needs one of " + ", ".join(READY_KINDS))
        return None
    if len(kinds) > 1:
        section.error_at_key(
            kinds[1],
            f"{section.path}: only one check per process, got {' and '.join(kinds)}",
        )
        return None
    kind = kinds[0]
    target = parse_target(section, kind)
    if target is None:
        return None
    if isinstance(target, float) and target >= timeout > 0:
        # The wait for readiness is bounded by timeout, fixed delay included.
        section.error("after", f"must be shorter than timeout ({format_duration(timeout)}), or raise timeout")
        return None
    return ReadyCheck(kind=kind, target=target, timeout=timeout, interval=interval)


Target = str | tuple[str, ...] | float


def parse_target(section: Settings, kind: ReadyKind) -> Target | None:
    """The check's target under the key ``kind``, validated; None (with the
    problem recorded) if it is missing or wrong.  Shared with ``health:``,
    whose probes are readiness checks too."""
    return _TARGET_READERS[kind](section, kind)


def _command_target(section: Settings, kind: ReadyKind) -> Target | None:
    return section.command(kind, required=True)


def _seconds_target(section: Settings, kind: ReadyKind) -> Target | None:
    return section.duration(kind, required=True)


def _path_target(section: Settings, kind: ReadyKind) -> Target | None:
    text = section.string(kind, required=True)
    if text is not None and (not text or "\0" in text):
        section.error(kind, "expected a path")
        return None
    return text


def _address_target(section: Settings, kind: ReadyKind) -> Target | None:
    text = section.string(kind, required=True)
    if text is None:
        return None
    try:
        parse_tcp_address(text)
    except ValueError as exc:
        section.error(kind, str(exc))
        return None
    return text


def _url_target(section: Settings, kind: ReadyKind) -> Target | None:
    text = section.string(kind, required=True)
    return None if text is None else _http_url(section, text)


# One reader per kind: what each kind's target is written as, and how it is
# checked (the runtime reads it back with the same shape, see
# supervisor.runtime.readiness).
_TARGET_READERS: dict[ReadyKind, Callable[[Settings, ReadyKind], Target | None]] = {
    "socket": _path_target,
    "file": _path_target,
    "tcp": _address_target,
    "http": _url_target,
    "exec": _command_target,
    "after": _seconds_target,
}


def parse_tcp_address(text: str) -> tuple[str, int]:
    """``host:port`` or ``[v6]:port`` to (host, port); ValueError says what is wrong."""
    host, sep, port_text = text.rpartition(":")
    usage = f"expected host:port such as 127.0.0.1:8080 or [::1]:8080, got {text!r}"
    if not sep or not host or not port_text.isdigit():
        raise ValueError(usage)
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise ValueError(usage) from None
    elif ":" in host or any(c.isspace() for c in host):
        raise ValueError(usage)
    port = int(port_text)
    if not 1 <= port <= 65535:
        raise ValueError(f"port {port} is out of range 1-65535")
    return host, port


def _http_url(section: Settings, text: str) -> str | None:
    problem = http_url_problem(text)
    if problem is not None:
        section.error("http", problem)
        return None
    return text
