"""The ``health:`` and ``control:`` sections, and a process's own ``health:``.

A health check is a readiness probe (``http``, ``tcp`` or ``exec``, the same
words as ``ready:``) repeated every ``period`` while the pod runs.  Written
under a process it belongs to that process: probed only while the process
runs, and ``on_failure: restart`` (its default there) restarts it.  Written
at the top level it is pod-wide; it may still name a ``process:`` to act on.
"""

from __future__ import annotations

from typing import cast

from .._units import format_duration
from ._errors import Problem
from ._model import ControlSettings, HealthAction, HealthCheck, HealthLevel, HealthSettings, ReadyCheck, ReadyKind
from ._ready import parse_target, parse_tcp_address
from ._settings import Settings

__all__ = ["CHECK_KINDS", "parse_control", "parse_health", "parse_process_checks"]

CHECK_KINDS = ("http", "tcp", "exec")
LEVELS: tuple[HealthLevel, ...] = ("alive", "ready")
ACTIONS: tuple[HealthAction, ...] = ("restart", "shutdown", "ignore")
_CHECK_KEYS = (*CHECK_KINDS, "name", "period", "timeout", "threshold", "level", "on_failure")
_DEFAULT = HealthCheck(name="", probe=ReadyCheck(kind="tcp", target=""))
_CONTROL = ControlSettings()


def parse_process_checks(entry: Settings, process: str) -> list[HealthCheck]:
    """The ``health:`` list of one process (a single mapping is a list of one)."""
    sections = entry.sections("health")
    checks = []
    for index, section in enumerate(sections):
        default_name = process if len(sections) == 1 else f"{process}-{index + 1}"
        check = _parse_check(section, process=process, default_name=default_name, allowed=_CHECK_KEYS)
        if check is not None:
            checks.append(check)
    return checks


def parse_health(top: Settings, process_checks: list[HealthCheck], processes: set[str]) -> HealthSettings:
    """The top-level ``health:`` section, merged with every process's checks."""
    section = top.section("health")
    checks = list(process_checks)
    listen = None
    if section is not None:
        section.check_keys(["listen", "checks"])
        listen = _listen(section)
        for entry in section.sections("checks"):
            check = _parse_check(entry, process=None, default_name=None, allowed=(*_CHECK_KEYS, "process"))
            if check is None:
                continue
            target = entry.string("process")
            if target is not None and target not in processes:
                names = ", ".join(repr(name) for name in sorted(processes)) or "none"
                entry.error("process", f"unknown process {target!r} (processes: {names})")
                continue
            if check.on_failure == "restart" and target is None:
                entry.error("on_failure", "restart needs a process: add process: NAME, or use shutdown or ignore")
                continue
            checks.append(_with_process(check, target))
    _check_unique(checks, top)
    return HealthSettings(checks=tuple(checks), listen=listen)


def _with_process(check: HealthCheck, process: str | None) -> HealthCheck:
    if process is None:
        return check
    return HealthCheck(
        name=check.name,
        probe=check.probe,
        period=check.period,
        timeout=check.timeout,
        threshold=check.threshold,
        level=check.level,
        on_failure=check.on_failure,
        process=process,
        position=check.position,
    )


def _check_unique(checks: list[HealthCheck], top: Settings) -> None:
    seen: dict[str, HealthCheck] = {}
    for check in checks:
        first = seen.get(check.name)
        if first is None:
            seen[check.name] = check
            continue
        where = f" (line {first.position.line})" if first.position else ""
        message = f"duplicate health check name {check.name!r}: already used{where}; give each its own name:"
        top.problems.append(Problem(check.position, message))


def _parse_check(
    section: Settings, *, process: str | None, default_name: str | None, allowed: tuple[str, ...]
) -> HealthCheck | None:
    section.check_keys(allowed)
    kinds = [kind for kind in CHECK_KINDS if kind in section]
    name = section.string("name", default_name, required=default_name is None)
    period = section.duration("period", _DEFAULT.period)
    # Unwritten, the timeout shrinks to fit a short period.
    timeout = section.duration("timeout", min(_DEFAULT.timeout, period) if period > 0 else _DEFAULT.timeout)
    threshold = section.integer("threshold", _DEFAULT.threshold, minimum=1)
    level = cast(HealthLevel, section.string("level", _DEFAULT.level, choices=LEVELS))
    default_action: HealthAction = "restart" if process is not None else "ignore"
    on_failure = cast(HealthAction, section.string("on_failure", default_action, choices=ACTIONS))
    ok = _valid_name(section, name) and _valid_times(section, period, timeout)
    if not kinds:
        # A misspelt or readiness-only kind (file:) is already reported as
        # an unknown key: no second problem for the same mistake.
        if set(section.keys()) <= set(allowed):
            section.error(None, "needs one of " + ", ".join(CHECK_KINDS))
        return None
    if len(kinds) > 1:
        section.error_at_key(kinds[1], f"{section.path}: only one probe per check, got {' and '.join(kinds)}")
        return None
    probe = _probe(section, kinds[0], timeout)
    if probe is None or not ok or name is None:
        return None
    return HealthCheck(
        name=name,
        probe=probe,
        period=period,
        timeout=timeout,
        threshold=threshold,
        level=level,
        on_failure=on_failure,
        process=process,
        position=section.position,
    )


def _valid_name(section: Settings, name: str | None) -> bool:
    if name is not None and (not name or not name.isprintable() or " " in name):
        section.error("name", f"invalid check name {name!r}: use letters, digits, - and _")
        return False
    return True


def _valid_times(section: Settings, period: float, timeout: float) -> bool:
    if period <= 0:
        section.error("period", "must be greater than 0 (it is the time between probes)")
        return False
    if timeout <= 0:
        section.error("timeout", "must be greater than 0")
        return False
    if timeout > period:
        section.error("timeout", f"must not be longer than period ({format_duration(period)})")
        return False
    return True


def _probe(section: Settings, kind: str, timeout: float) -> ReadyCheck | None:
    # The same readers and messages as ready:, so the two never disagree.
    target = parse_target(section, cast(ReadyKind, kind))
    if target is None:
        return None
    return ReadyCheck(kind=cast(ReadyKind, kind), target=target, timeout=timeout, interval=timeout)


def _listen(section: Settings) -> tuple[str, int] | None:
    raw = section.raw("listen")
    if raw is None:
        return None
    if isinstance(raw, int) and not isinstance(raw, bool):
        return _bare_port(section, raw)
    text = section.string("listen")
    if text is None:
        return None
    if text.strip().isdigit():
        return _bare_port(section, int(text))  # "8080" is the same port as 8080
    try:
        return parse_tcp_address(text)
    except ValueError as exc:
        section.error("listen", str(exc))
        return None


def _bare_port(section: Settings, port: int) -> tuple[str, int] | None:
    """A bare port: every address of the pod, as the kubelet probes the
    pod's IP; write 127.0.0.1:PORT to keep it local."""
    if not 1 <= port <= 65535:
        section.error("listen", f"port {port} is out of range 1-65535")
        return None
    return ("0.0.0.0", port)


def parse_control(section: Settings | None) -> ControlSettings:
    """``control: {socket: PATH | false, log_lines: N}``."""
    if section is None:
        return ControlSettings()
    section.check_keys(["socket", "log_lines"])
    log_lines = section.integer("log_lines", _CONTROL.log_lines, minimum=0, maximum=1_000_000)
    raw = section.raw("socket")
    if raw is False:
        return ControlSettings(enabled=False, log_lines=log_lines)
    path = section.string("socket")
    if path is not None and (not path.startswith("/") or "\0" in path):
        section.error("socket", f"expected an absolute path (or false to turn the socket off), got {path!r}")
        path = None
    if path is not None and len(path.encode()) > 107:
        section.error("socket", "is too long for a Unix socket address (at most 107 bytes)")
        path = None
    return ControlSettings(socket=path, log_lines=log_lines)
