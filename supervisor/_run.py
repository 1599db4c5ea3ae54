"""The run command in the orchestrator process: the configuration file with
the command line on top, the plugins, the main process started as early as
it can be, then the trio program.

PID 1 forks the orchestrator and hands it the parsed ``RunOptions``
(supervisor/pid1/options.py); this module is what the orchestrator imports
first, so it stays clear of argparse, which only the in-process
subcommands (supervisor/cli.py) need: the orchestrator keeps what it
imports for the pod's whole life.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import replace
from types import MappingProxyType
from typing import TYPE_CHECKING

from ._usage import UsageError
from .pid1.exits import ExitCode
from .pid1.options import PROG, RunOptions

if TYPE_CHECKING:
    from ._compiled import StartedFromPlan
    from ._hooks import HookRunner
    from .config import Config
    from .pid1.early import EarlySignals

__all__ = [
    "adopt_from_plan",
    "build_config",
    "config_error",
    "prespawn_main",
    "reload_config",
    "run_main",
    "usage_error",
]


def build_config(options: RunOptions, environ: Mapping[str, str] | None = None, *, apart: bool = False) -> Config:
    """The configuration file (if any) with the command line applied on top;
    its ``${VAR}`` references read ``environ`` (default: ours); ``apart``:
    parsed by a short-lived child (``load_config``).

    Raises ConfigError or UsageError.
    """
    from .config import Config, ProcessSpec, load_config

    config = load_config(options.config_path, environ, apart=apart) if options.config_path else Config()
    if options.grace_period is not None:
        config = replace(config, grace_period=options.grace_period)
    if options.log_format is not None:
        config = replace(config, log_format=options.log_format)  # type: ignore[arg-type]
    if options.log_level is not None:
        config = replace(config, log_level=options.log_level)  # type: ignore[arg-type]
    if options.verbose:
        config = replace(config, log_level="debug")
    if options.shutdown_signals is not None:
        config = replace(config, shutdown_signals=options.shutdown_signals)
    config = replace(
        config,
        rewrite=MappingProxyType(dict(options.rewrite)),
        forward_to_group=options.process_group,
        zero_exit_codes=options.zero_exit_codes,
    )
    if options.command:
        if config.main is not None:
            raise UsageError(
                f"both a command after -- and a main process ({config.main.name!r} in {options.config_path}); "
                "drop one of them"
            )
        main = ProcessSpec(
            name=_unique_name(options.command[0], {p.name for p in config.processes}),
            command=options.command,
            # The file's processes are the command's helpers: up and ready
            # before it starts, stopped after it.
            depends_on=tuple(p.name for p in config.processes),
            main=True,
            stop_signal=options.rewrite.get(signal.SIGTERM, signal.SIGTERM) or signal.SIGTERM,
            # The command keeps the container's stdout and stderr, as under
            # tini (supervisor/runtime/capture.py says why).
            inherit_output=True,
        )
        config = replace(config, processes=(*config.processes, main))
    _check_privileges(config)
    return config


def _check_privileges(config: Config) -> None:
    """Users, groups and capabilities that cannot work here fail now, with
    their position, rather than as a 126 once other processes are running."""
    changing = [spec for spec in config.processes if spec.changes_privileges]
    if not changing:
        return
    from .config import ConfigError, Problem
    from .runtime.privileges import check_privileges

    problems = []
    for spec in changing:
        reason = check_privileges(spec)
        if reason:
            problems.append(Problem(spec.position, f"processes.{spec.name}: {reason}"))
    if problems:
        raise ConfigError(problems)


def _unique_name(program: str, taken: set[str]) -> str:
    base = re.sub(r"[^a-z0-9-]+", "-", os.path.basename(program).lower()).strip("-") or "main"
    name = base
    while name in taken:
        name = f"{name}-main"
    return name


def run_main(
    options: RunOptions,
    *,
    early: EarlySignals,
    status_fd: int | None = None,
    inherited_fds: tuple[int, ...] = (),
    from_plan: StartedFromPlan | None = None,
) -> int:
    """The orchestrator process's main: load, supervise; returns the exit code.

    ``from_plan`` is the main process already started from the compiled
    plan (supervisor/_compiled.py): adopted once the file has been validated
    as always.
    """
    from ._deferred import defer_trio_extras
    from .config import ConfigError
    from .pid1.protocol import Grace, ShutdownSignals, StatusPipe

    defer_trio_extras()  # first: plugins may import trio before we do

    status = StatusPipe(status_fd)
    try:
        # PyYAML stays out of the orchestrator's memory (a re-plan, rare,
        # parses in place: by then threads run, which a fork would not copy).
        config = build_config(options, apart=True)
        # PID 1 enforces the wall with this grace period, and starts it on
        # these signals, from now on.
        status.send(Grace(config.grace_period))
        status.send(ShutdownSignals(config.shutdown_signals))
        hooks = _load_plugins(config)
    except (UsageError, ConfigError) as exc:
        if from_plan is not None:
            # Not with this configuration: nothing runs unsupervised.
            from_plan.discard()
        return usage_error(str(exc)) if isinstance(exc, UsageError) else config_error(exc)
    started = adopt_from_plan(config, from_plan) or prespawn_main(config, hooks, early, inherited_fds)
    from ._orchestrator import run_orchestrator  # trio: ~70 ms, after the spawn

    return run_orchestrator(
        config,
        hooks,
        early=early,
        status=status,
        inherited_fds=inherited_fds,
        main_started=started,
        reload=(lambda: reload_config(options)) if options.config_path else None,
    )


def reload_config(options: RunOptions) -> Config:
    """The file read again for ``supervisor replan``, the command line
    applied, checked as completely as at start (budget, plugins' sections);
    raises ConfigError with every problem."""
    from ._pluginhost import PluginHost
    from .config import ConfigError, Position, budget_problems

    try:
        config = build_config(options)
    except UsageError as exc:
        raise ConfigError.at(Position(options.config_path or "-", 1, 1), str(exc)) from None
    problems = budget_problems(config)
    if problems:
        raise ConfigError(problems)
    if config.plugins:
        # A host of its own: the running plugins keep their settings.
        PluginHost.discover().enable(config)
    return config


def adopt_from_plan(config: Config, from_plan: StartedFromPlan | None) -> StartedFromPlan | None:
    """``from_plan`` if it is the validated configuration's main process.
    Identical bytes and variables give the same main process; should it
    differ all the same, it is stopped (it was never told to do anything
    but start) and the usual path starts the right one."""
    if from_plan is None:
        return None
    from ._compiled import recipe_of

    if recipe_of(config) == from_plan.recipe:
        return from_plan
    from_plan.discard()
    print(
        f"{PROG}: the main process started from the compiled plan is not the configuration's: "
        "killed it and starting it again (run `supervisor check` to compile the file anew)",
        file=sys.stderr,
    )
    return None


def prespawn_main(
    config: Config, hooks: HookRunner, early: EarlySignals, inherited_fds: tuple[int, ...]
) -> subprocess.Popen[bytes] | None:
    """Start the main process before trio is imported, when nothing has to
    happen first: no dependencies, no plugins (no start-up hooks), no output
    to prefix, no signal waiting.  That is the plain ``supervisor -- COMMAND``
    and it saves the main process the orchestrator's imports (~100 ms).
    Anything unusual (a spawn error, say) is left to the orchestrator, which
    reports it properly."""
    from ._hooks import NoPlugins

    main = config.main
    if main is None or main.depends_on or main.log_prefix or early.pending or not isinstance(hooks, NoPlugins):
        return None
    from .runtime.spawn import start_now

    try:
        return start_now(main, inherited_fds)
    except (OSError, subprocess.SubprocessError):
        return None


def _load_plugins(config: Config) -> HookRunner:
    if not config.plugins:
        from ._hooks import NoPlugins

        return NoPlugins()
    from ._pluginhost import PluginHost

    host = PluginHost.discover()
    host.enable(config)  # raises ConfigError listing every plugin's problems
    return host


def usage_error(message: str) -> int:
    print(f"{PROG}: {message} (see {PROG} --help)", file=sys.stderr)
    return ExitCode.USAGE


def config_error(exc: Exception) -> int:
    print(str(exc), file=sys.stderr)
    return ExitCode.USAGE
