"""One entry of ``processes:``: a ``ProcessSpec`` from its YAML mapping.

Checks that need the other processes too (unique names, ``depends_on``
targets, cycles, a single main) live in ``_load``.
"""

from __future__ import annotations

import grp
import pwd
import re
import signal
from collections.abc import Callable
from types import MappingProxyType
from typing import Literal, cast

from .._units import format_duration
from ._model import Backoff, Capabilities, ProcessSpec, RestartPolicy
from ._ready import parse_ready
from ._settings import Settings

__all__ = ["CAPABILITIES", "PROCESS_KEYS", "parse_process"]

PROCESS_KEYS = (
    "name", "command", "depends_on", "main", "env", "cwd", "user", "group", "no_new_privs",
    "capabilities", "restart", "backoff", "on_failure", "stop_signal", "stop_timeout",
    "process_group", "ready", "log_prefix", "health",
)  # fmt: skip
_NAME = re.compile(r"[a-z0-9-]+")
_ENV_NAME = re.compile(r"[^=\0]+")
RESTART_POLICIES: tuple[RestartPolicy, ...] = ("never", "on-failure", "always")

# Linux capabilities (capability.h, up to 6.x), without the CAP_ prefix.
CAPABILITIES = frozenset((
    "chown", "dac_override", "dac_read_search", "fowner", "fsetid", "kill", "setgid", "setuid",
    "setpcap", "linux_immutable", "net_bind_service", "net_broadcast", "net_admin", "net_raw",
    "ipc_lock", "ipc_owner", "sys_module", "sys_rawio", "sys_chroot", "sys_ptrace", "sys_pacct",
    "sys_admin", "sys_boot", "sys_nice", "sys_resource", "sys_time", "sys_tty_config", "mknod",
    "lease", "audit_write", "audit_control", "setfcap", "mac_override", "mac_admin", "syslog",
    "wake_alarm", "block_suspend", "audit_read", "perfmon", "bpf", "checkpoint_restore",
))  # fmt: skip


def parse_process(entry: Settings) -> ProcessSpec | None:
    """Validate one process, recording its problems.

    The spec is returned whenever the name is valid, even if other keys are
    not, so that checks across processes (``depends_on``) do not report
    follow-on problems; None if the name itself is missing or invalid.
    """
    entry.check_keys(PROCESS_KEYS)
    name = entry.string("name", required=True)
    if name is not None and not _NAME.fullmatch(name):
        entry.error("name", f"invalid name {name!r}: use lower-case letters, digits and -")
        name = None
    command = entry.command("command", required=True)
    ready = entry.section("ready")
    spec = ProcessSpec(
        name=name or "?",
        command=command or ("?",),
        depends_on=_depends_on(entry),
        main=entry.boolean("main"),
        env=MappingProxyType(_env(entry)),
        cwd=_path(entry, "cwd"),
        user=_account(entry, "user", pwd.getpwnam, "/etc/passwd"),
        group=_account(entry, "group", grp.getgrnam, "/etc/group"),
        no_new_privs=entry.boolean("no_new_privs") if "no_new_privs" in entry else None,
        capabilities=_capabilities(entry.section("capabilities")),
        restart=cast(RestartPolicy, entry.string("restart", "never", choices=RESTART_POLICIES)),
        backoff=_backoff(entry.section("backoff")),
        on_failure=cast(
            Literal["shutdown", "ignore"],
            entry.string("on_failure", "shutdown", choices=("shutdown", "ignore")),
        ),
        stop_signal=entry.signal("stop_signal", signal.SIGTERM),
        stop_timeout=entry.duration("stop_timeout"),
        process_group=entry.boolean("process_group", True),
        ready=parse_ready(ready) if ready is not None else None,
        log_prefix=entry.boolean("log_prefix"),
        position=entry.position,
    )
    if spec.stop_signal == signal.SIGSTOP:
        entry.error("stop_signal", "SIGSTOP pauses a process instead of stopping it: use TERM, INT or QUIT")
    return spec if name is not None else None


def _depends_on(entry: Settings) -> tuple[str, ...]:
    names = entry.string_list("depends_on")
    seen: list[str] = []
    for name in names:
        if name in seen:
            entry.error("depends_on", f"{name!r} is listed twice")
        else:
            seen.append(name)
    return tuple(seen)


def _env(entry: Settings) -> dict[str, str]:
    env = entry.mapping("env")
    for name, value in env.items():
        if not _ENV_NAME.fullmatch(name):
            entry.error("env", f"invalid variable name {name!r}: it may not be empty or contain '='")
        if "\0" in value:
            entry.error("env", f"the value of {name!r} contains a NUL character")
    return env


def _path(entry: Settings, key: str) -> str | None:
    path = entry.string(key)
    if path is not None and (not path or "\0" in path):
        entry.error(key, "expected a path")
        return None
    return path


def _account(entry: Settings, key: str, lookup: Callable[[str], object], database: str) -> str | None:
    """A user or group: a number as it is, a name only if the system knows it."""
    value = entry.string(key)
    if value is None:
        return None
    if value.isdigit():
        if int(value) > 0xFFFFFFFE:  # (uid_t)-1 means "unchanged" to setuid(2)
            entry.error(key, f"id {value} is out of range")
            return None
        return value
    try:
        lookup(value)
    except (KeyError, ValueError):
        entry.error(key, f"unknown {key} {value!r} (not in {database}; a number is used as it is)")
        return None
    return value


def _backoff(section: Settings | None) -> Backoff:
    default = Backoff()
    if section is None:
        return default
    section.check_keys(["initial", "max", "max_restarts", "window"])
    initial = section.duration("initial", default.initial)
    maximum = section.duration("max", default.max)
    backoff = Backoff(
        initial=initial,
        max=maximum,
        max_restarts=section.integer("max_restarts", default.max_restarts, minimum=0),
        window=section.duration("window", default.window),
    )
    if maximum < initial:
        section.error("max", f"must be at least initial ({format_duration(initial)}), got {format_duration(maximum)}")
    if backoff.window <= 0:
        section.error("window", "must be greater than 0")
    return backoff


def _capabilities(section: Settings | None) -> Capabilities | None:
    if section is None:
        return None
    section.check_keys(["drop", "keep"])
    drop = _capability_names(section, "drop", allow_all=True)
    keep = _capability_names(section, "keep", allow_all=False)
    for name in sorted(set(drop) & set(keep)):
        section.error("keep", f"{name} is both dropped and kept")
    return Capabilities(drop=drop, keep=keep)


def _capability_names(section: Settings, key: str, *, allow_all: bool) -> tuple[str, ...]:
    names: list[str] = []
    for raw in section.string_list(key):
        name = raw.strip().lower().removeprefix("cap_")
        if (name == "all" and allow_all) or name in CAPABILITIES:
            names.append(name)
        else:
            hint = ", or all" if allow_all else ""
            close = _closest(name)
            section.error(
                key,
                f"unknown capability {raw!r}"
                + (f" (did you mean {close.upper()}?)" if close else f": use names such as NET_BIND_SERVICE{hint}"),
            )
    return tuple(dict.fromkeys(names))


def _closest(name: str) -> str | None:
    import difflib  # only for a wrong name: not in the memory of every run

    matches = difflib.get_close_matches(name, sorted(CAPABILITIES), n=1, cutoff=0.7)
    return matches[0] if matches else None
