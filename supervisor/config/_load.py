"""``load_config``: a YAML file to a validated ``Config``, or every problem at once."""

from __future__ import annotations

import os
from collections.abc import Mapping
from types import MappingProxyType
from typing import Literal, cast

from .._units import SHUTDOWN_SIGNALS, check_grace_period, parse_shutdown_signal
from ._errors import ConfigError, Problem
from ._health import parse_control, parse_health, parse_process_checks
from ._model import Config, HealthCheck, ProcessSpec
from ._nodes import Node, child_path, one_line
from ._order import find_cycles
from ._position import Position
from ._process import parse_process
from ._settings import Settings

__all__ = ["TOP_LEVEL_KEYS", "load_config"]

TOP_LEVEL_KEYS = ("grace_period", "shutdown_signals", "log", "processes", "plugins", "control", "health")
LOG_FORMATS = ("text", "json")
LOG_LEVELS = ("debug", "info", "warning", "error")


def load_config(path: str, environ: Mapping[str, str] | None = None, *, apart: bool = False) -> Config:
    """Read and validate the configuration at ``path``.

    ``${VAR}`` references are expanded from ``environ`` (default: this
    process's environment).  Raises ConfigError listing every problem, each as
    ``FILE:LINE:COLUMN: message``; no other exception escapes, whatever the
    file holds.  ``apart``: the YAML is parsed by a short-lived child process,
    so that PyYAML never loads into this one (the orchestrator's, which
    keeps running); the result is the same.
    """
    # PyYAML only when there is a file to read: `supervisor -- COMMAND`
    # starts its main process sooner without it.
    if apart:
        from ._apart import parse_file_apart as parse_file
    else:
        from ._source import parse_file

    env = os.environ if environ is None else environ
    try:
        root, problems = parse_file(path, env)
        if root is None:
            problems = problems or [Problem(Position(path, 1, 1), _EMPTY)]
            raise ConfigError(Problem(p.position, one_line(p.message)) for p in problems)
        config = _build(root, path, problems)
    except RecursionError:
        raise ConfigError.at(Position(path, 1, 1), "the document is nested too deeply") from None
    if problems:
        raise ConfigError(Problem(p.position, one_line(p.message)) for p in problems)
    return config


_EMPTY = "the configuration is empty: expected a mapping with keys such as processes: and grace_period:"


def _build(root: Node, path: str, problems: list[Problem]) -> Config:
    if root.bad:
        return Config(path=path)
    if root.value is None:
        problems.append(Problem(root.position, _EMPTY))
        return Config(path=path)
    if not isinstance(root.value, dict):
        problems.append(
            Problem(
                root.position,
                "the top level must be a mapping with keys such as processes: and grace_period:, "
                f"got {root.describe()}",
            )
        )
        return Config(path=path)
    top = Settings(root, path="", problems=problems, reserved=())
    # x-* keys are free for the user, as in docker compose: a place for anchors.
    top.check_keys([*TOP_LEVEL_KEYS, *(key for key in root.value if key.startswith("x-"))])
    grace_period = top.duration("grace_period", 30.0)
    try:
        check_grace_period(grace_period)
    except ValueError as exc:
        top.error("grace_period", str(exc))
        grace_period = 30.0
    log = top.section("log")
    log_format, log_level = "text", "info"
    if log is not None:
        log.check_keys(["format", "level"])
        log_format = log.string("format", log_format, choices=LOG_FORMATS)
        log_level = log.string("level", log_level, choices=LOG_LEVELS)
    checks: list[HealthCheck] = []
    processes = _processes(root.value, top, checks)
    return Config(
        processes=processes,
        control=parse_control(top.section("control")),
        health=parse_health(top, checks, {spec.name for spec in processes}),
        grace_period=grace_period,
        shutdown_signals=top.signal_set("shutdown_signals", SHUTDOWN_SIGNALS, parse_shutdown_signal),
        log_format=cast(Literal["text", "json"], log_format),
        log_level=cast(Literal["debug", "info", "warning", "error"], log_level),
        plugins=MappingProxyType(_plugins(root.value, top)),
        path=path,
        positions=MappingProxyType(dict(root.keys)),
    )


def _processes(root: dict[str, Node], top: Settings, checks: list[HealthCheck]) -> tuple[ProcessSpec, ...]:
    node = root.get("processes")
    if node is not None and isinstance(node.value, dict):
        # `processes: {web: {...}}` is another tool's layout; sections() would
        # read it as a single process with a key named "web".
        top.error("processes", "expected a list of processes, each written `- name: ...`, got a mapping")
        return ()
    entries = top.sections("processes")
    specs: list[ProcessSpec] = []
    entry_of: dict[str, Settings] = {}
    for entry in entries:
        spec = parse_process(entry)
        if spec is None:
            continue
        if spec.name in entry_of:
            first = entry_of[spec.name].position_of("name")
            line = f" (line {first.line})" if first else ""
            entry.error("name", f"duplicate process name {spec.name!r}: already used{line}")
            continue
        entry_of[spec.name] = entry
        specs.append(spec)
        checks.extend(parse_process_checks(entry, spec.name))
    # Every name written, valid or not: a dependency on an invalid name is
    # not a second problem.
    written = {str(name) for entry in entries if (name := entry.raw("name")) is not None}
    _check_dependencies(specs, entry_of, written)
    _check_main(specs, entry_of)
    return tuple(specs)


def _check_dependencies(specs: list[ProcessSpec], entry_of: dict[str, Settings], written: set[str]) -> None:
    for spec in specs:
        entry = entry_of[spec.name]
        for dep in spec.depends_on:
            if dep == spec.name:
                entry.error("depends_on", f"{spec.name!r} cannot depend on itself")
            elif dep not in written:
                # Every name written, also of entries with problems of their own.
                names = ", ".join(repr(name) for name in sorted(written) if name != spec.name)
                known = f"processes: {names}" if names else "no other process is configured in this file"
                entry.error("depends_on", f"unknown process {dep!r} ({known})")
    for cycle in find_cycles({spec.name: spec.depends_on for spec in specs}):
        entry_of[cycle[0]].error("depends_on", f"dependency cycle: {' -> '.join(cycle)}")


def _check_main(specs: list[ProcessSpec], entry_of: dict[str, Settings]) -> None:
    mains = [spec for spec in specs if spec.main]
    for extra in mains[1:]:
        first = entry_of[mains[0].name].position_of("main")
        line = f" (line {first.line})" if first else ""
        entry_of[extra.name].error("main", f"only one process can be main: {mains[0].name!r} already is{line}")


def _plugins(root: dict[str, Node], top: Settings) -> dict[str, Settings]:
    """Each plugin's section, unvalidated: the plugin reads it with Settings."""
    node = root.get("plugins")
    if node is None or node.bad or node.value is None:
        return {}
    if not isinstance(node.value, dict):
        top.error(
            "plugins",
            f"expected a mapping of plugin names to their settings, got {node.describe()}",
        )
        return {}
    plugins = {}
    for name, item in node.value.items():
        if item.bad:
            continue
        section = Node({}, item.position) if item.value is None else item
        # (`kubernetes:` with nothing after it: enabled with all defaults.)
        if not isinstance(section.value, dict):
            message = f"expected a mapping of settings ({{}} for none), got {item.describe()}"
            top.problems.append(Problem(item.position, f"{child_path('plugins', name)}: {message}"))
            continue
        # Each plugin has its own problem list: the plugin host reports them
        # once the plugin's supervisor_configure hook has read its section.
        plugins[name] = Settings(section, path=child_path("plugins", name))
    return plugins
