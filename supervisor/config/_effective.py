"""``supervisor check --effective``: the configuration as the supervisor will
run it — every default filled in, ``${VAR}`` expanded, the command line's
options applied — as YAML that ``load_config`` reads back, with secrets masked.

Masked: the values of environment variables and plugin settings whose names
say they hold a secret (``password``, ``token``, ``secret``, ``key``...) and
the password of every URL.  The plan of ``supervisor check`` says what
happens when; this says what was read.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from .._redact import redact_url
from .._units import format_duration, signal_name
from ._model import Backoff, Config, HealthCheck, ProcessSpec, ReadyCheck
from ._settings import Settings

__all__ = ["MASK", "effective_config", "plain_settings"]

MASK = "***"
_SECRET_NAME = re.compile(r"pass(word|wd)?|secret|token|credential|private|api[_-]?key|(^|[_-])key$", re.IGNORECASE)
_URL = re.compile(r"^[a-z][a-z0-9+.-]*://", re.IGNORECASE)


def effective_config(config: Config) -> str:
    """The effective configuration of a valid ``config``, as YAML text."""
    import yaml

    data: dict[str, Any] = {
        "grace_period": format_duration(config.grace_period),
        "shutdown_signals": [signal_name(s).removeprefix("SIG") for s in sorted(config.shutdown_signals)],
        "log": {"format": config.log_format, "level": config.log_level},
        "control": {
            # null: the default place ($SUPERVISOR_SOCKET, /run/supervisor/, /tmp/supervisor-UID/).
            "socket": config.control.socket if config.control.enabled else False,
            "log_lines": config.control.log_lines,
        },
        "health": {
            "listen": None if config.health.listen is None else "{}:{}".format(*config.health.listen),
            "checks": [_check(check) for check in config.health.checks if check.process is None],
        },
        "plugins": {name: _masked(plain_settings(settings)) for name, settings in config.plugins.items()},
        "processes": [_process(spec, config) for spec in config.processes],
    }
    header = f"# effective configuration of {config.path}\n" if config.path else "# effective configuration\n"
    return header + yaml.safe_dump(data, sort_keys=False, default_flow_style=False, allow_unicode=True, width=100)


def plain_settings(settings: object) -> object:
    """A plugin's section as plain data (dicts, lists, str...), to print or compare."""
    if isinstance(settings, Settings):
        keys = settings.keys()
        return {key: settings.raw(key) for key in keys}
    return settings


def _masked(value: object, name: str = "") -> object:
    if isinstance(value, Mapping):
        return {key: _masked(item, str(key)) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_masked(item, name) for item in value]
    if isinstance(value, str):
        if name and _SECRET_NAME.search(name):
            return MASK
        return redact_url(value) if _URL.match(value) else value
    return value


def _process(spec: ProcessSpec, config: Config) -> dict[str, Any]:
    data: dict[str, Any] = {
        "name": spec.name,
        "command": list(spec.command),
        "main": spec.main,
        "depends_on": list(spec.depends_on),
        "env": _masked(dict(spec.env)),
        "cwd": spec.cwd,
        "user": spec.user,
        "group": spec.group,
        "no_new_privs": _no_new_privs(spec),
        "restart": spec.restart,
        "backoff": _backoff(spec.backoff),
        "on_failure": spec.on_failure,
        "stop_signal": signal_name(spec.stop_signal),
        "stop_timeout": None if spec.stop_timeout is None else format_duration(spec.stop_timeout),
        "process_group": spec.process_group,
        "log_prefix": spec.log_prefix,
        "ready": None if spec.ready is None else _ready(spec.ready, with_interval=True),
        "health": [_check(check, nested=True) for check in config.health.checks if check.process == spec.name],
    }
    if spec.capabilities is not None:
        data["capabilities"] = {"drop": list(spec.capabilities.drop), "keep": list(spec.capabilities.keep)}
    return data


def _no_new_privs(spec: ProcessSpec) -> bool:
    """What a process gets when the file does not say: on for a ``user:``
    other than root (the safe default of ``supervisor.runtime.privileges``),
    off otherwise.  A user this machine cannot resolve counts as not root:
    such a process cannot start, and its own error says why."""
    if spec.no_new_privs is not None:
        return spec.no_new_privs
    if spec.user is None:
        return False
    if spec.user.isdigit():
        return int(spec.user) != 0
    import pwd

    try:
        return pwd.getpwnam(spec.user).pw_uid != 0
    except KeyError:
        return True


def _backoff(backoff: Backoff) -> dict[str, Any]:
    return {
        "initial": format_duration(backoff.initial),
        "max": format_duration(backoff.max),
        "max_restarts": backoff.max_restarts,
        "window": format_duration(backoff.window),
    }


def _ready(check: ReadyCheck, *, with_interval: bool) -> dict[str, Any]:
    target = check.target
    if isinstance(target, tuple):
        value: object = list(target)
    elif isinstance(target, float):
        value = format_duration(target)
    else:
        value = redact_url(target) if check.kind == "http" else target
    data: dict[str, Any] = {check.kind: value}
    if check.kind != "after":
        data["timeout"] = format_duration(check.timeout)
        if with_interval:
            data["interval"] = format_duration(check.interval)
    return data


def _check(check: HealthCheck, *, nested: bool = False) -> dict[str, Any]:
    data: dict[str, Any] = {"name": check.name, **_ready(check.probe, with_interval=False)}
    data.update(
        period=format_duration(check.period),
        timeout=format_duration(check.timeout),
        threshold=check.threshold,
        level=check.level,
        on_failure=check.on_failure,
    )
    if check.process is not None and not nested:
        data["process"] = check.process
    return data
