"""The command line: pick a subcommand, turn user mistakes into one line.

``supervisor [run] [OPTIONS] [-- COMMAND [ARG...]]`` runs in the orchestrator
process, forked by PID 1, which parsed the options (supervisor/pid1/options.py)
and hands them over as they are; ``check``, ``plugins``, ``--version``,
``--help`` and plugin-provided subcommands run in-process.  Every usage or
configuration error is one line on stderr and exit status 2, before anything
is started.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from types import MappingProxyType
from typing import TYPE_CHECKING, cast

from . import __version__
from ._cliparse import Parser as _Parser
from ._cliparse import UsageError, describe_commands, did_you_mean, join_option_values, subcommands
from .pid1.options import DESCRIPTION, PROG, RunOptions, grace_period_argument, run_parser

if TYPE_CHECKING:
    from ._compiled import StartedFromPlan
    from ._hooks import HookRunner
    from ._pluginhost import PluginHost
    from .config import Config
    from .pid1.early import EarlySignals

__all__ = ["RunOptions", "UsageError", "main", "print_info", "run_main"]

USAGE_ERROR = 2


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
    from .config import ConfigError, Problem
    from .runtime.privileges import check_privileges

    problems = []
    for spec in config.processes:
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
    from .config import ConfigError
    from .pid1.protocol import Grace, ShutdownSignals, StatusPipe

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
        return _usage_error(str(exc)) if isinstance(exc, UsageError) else _config_error(exc)
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


def print_info(what: str) -> int:
    """``supervisor --help`` or ``--version`` (PID 1 routes them here)."""
    if what == "version":
        print(f"{PROG} (pid1-supervisor) {__version__}")
    else:
        print(overview(), end="")
    return 0


def _usage_error(message: str) -> int:
    print(f"{PROG}: {message} (see {PROG} --help)", file=sys.stderr)
    return USAGE_ERROR


def _config_error(exc: Exception) -> int:
    print(str(exc), file=sys.stderr)
    return USAGE_ERROR


# --------------------------------------------------------------------------
# In-process subcommands
# --------------------------------------------------------------------------


def main(args: Sequence[str]) -> int:
    """Entry for everything but ``run`` and the control commands (the
    console script, supervisor/_main.py, routes those elsewhere)."""
    from .config import ConfigError

    try:
        return _dispatch(args)
    except BrokenPipeError:
        # `supervisor plugins | head`: the reader has all it wanted.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except UsageError as exc:
        return _usage_error(str(exc))
    except ConfigError as exc:
        return _config_error(exc)


def _dispatch(args: Sequence[str]) -> int:
    if list(args[:2]) == ["completion", "--names"]:
        # What the shell completes process names from: no plugin scan.
        from ._completion import process_names

        return process_names()
    host = _discover()
    parser = command_parser(host)
    ns = parser.parse_args(join_option_values(args, _subparser(parser, args)))
    if getattr(ns, "handler", None) is None:
        print(overview(host), end="")
        return 0
    return int(ns.handler(ns))


def _discover() -> PluginHost:
    from ._pluginhost import PluginHost

    return PluginHost.discover()


def _subparser(parser: argparse.ArgumentParser, args: Sequence[str]) -> argparse.ArgumentParser:
    """The parser of the subcommand ``args`` name (for options that take a
    value starting with a dash), else ``parser``."""
    found = subcommands(parser).get(args[0]) if args else None
    return found[1] if found is not None else parser


_DESCRIPTION = DESCRIPTION
_RUN_HELP = "supervise COMMAND and the processes of a configuration (the default: `run` may be left out)"


def command_parser(host: PluginHost | None) -> _Parser:
    """The whole command line as one parser: ``run``, ``check``, ``plugins``,
    ``help``, ``completion``, ``replan``, the control commands and the
    subcommands of every installed plugin.  ``help``, ``--help`` and the
    shell completion are made from it, so they list what exists."""
    from .control.client import control_parser

    parser = _Parser(prog=PROG, description=_DESCRIPTION, add_help=False)
    parser.add_argument("-h", "--help", action="store_true", help="show this help and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    run = run_parser()
    sub.add_parser("run", help=_RUN_HELP, parents=[run], add_help=False, usage=run.usage)
    check = sub.add_parser("check", help="validate a configuration and print its start and shutdown plan")
    check.add_argument("-c", "--config", metavar="FILE", help="YAML configuration (env SUPERVISOR_CONFIG)")
    check.add_argument(
        "--grace-period",
        metavar="DURATION",
        type=grace_period_argument,
        help="as for run: replaces the file's grace_period",
    )
    check.add_argument(
        "--no-compile",
        action="store_true",
        help="do not write the compiled plan (FILE's __pycache__) that lets run start the main process sooner",
    )
    check.add_argument(
        "--effective",
        action="store_true",
        help="print the effective configuration instead: defaults filled in, ${VAR} expanded, secrets masked",
    )
    check.set_defaults(handler=lambda ns: _check(ns, _enabled_host(host)))
    plugins = sub.add_parser("plugins", help="list installed plugins, their hooks and settings")
    plugins.set_defaults(handler=lambda ns: _plugins(_enabled_host(host)))
    help_parser = sub.add_parser("help", help="explain every command, or COMMAND")
    help_parser.add_argument("topic", nargs="?", metavar="COMMAND", help="the command to explain")
    help_parser.set_defaults(handler=lambda ns: _help(parser, host, ns.topic))
    completion = sub.add_parser(
        "completion",
        help='print a shell completion script: eval "$(supervisor completion bash)"',
        description="Print a completion script for bash or zsh, made from this command line; "
        "process names are completed from the running supervisor's control socket.",
    )
    completion.add_argument("shell", choices=["bash", "zsh"], help="the shell to complete for")
    completion.set_defaults(handler=lambda ns: _completion(parser, ns.shell))
    for name, (text, client_sub) in subcommands(control_parser()).items():
        # The control commands run in their own stdlib-only client (the
        # init layer routes them there first); here they are for help,
        # the overview and completion.
        sub.add_parser(
            name,
            help=text,
            parents=[cast(_Parser, client_sub)],  # (made with parser_class=_Parser)
            add_help=False,
            description=client_sub.description,
            usage=client_sub.format_usage().removeprefix("usage: ").rstrip(),
        )
    if host is not None:
        host.add_commands(sub)
    describe_commands(parser)
    return parser


def _enabled_host(host: PluginHost | None) -> PluginHost:
    return host if host is not None else _discover()


def overview(host: PluginHost | None = None) -> str:
    """``supervisor --help``: the usage, every command with its one line,
    the run options and the exit statuses."""
    parser = command_parser(host if host is not None else _discover())
    rows = [(name, text) for name, (text, _) in subcommands(parser).items()]
    width = max(len(name) for name, _ in rows) + 2
    commands = "".join(f"  {name:<{width}}{text}\n" for name, text in rows)
    run_help = run_parser().format_help()
    usage, _, rest = run_help.partition("\n\n")
    _description, _, options = rest.partition("\n\n")
    return (
        f"{usage}\n\n{_DESCRIPTION}\n\n"
        f"commands (`{PROG} help COMMAND` explains one; the control commands take --socket PATH):\n"
        f"{commands}\nrun {options}"
    )


def _help(parser: _Parser, host: PluginHost | None, topic: str | None) -> int:
    if topic is None or topic == "run":
        print(overview(host), end="")
        return 0
    found = subcommands(parser).get(topic)
    if found is None:
        raise UsageError(f"no command {topic!r}{did_you_mean(topic, subcommands(parser))}")
    found[1].print_help()
    return 0


def _completion(parser: _Parser, shell: str) -> int:
    from ._completion import script

    print(script(parser, shell), end="")
    return 0


def _check(ns: argparse.Namespace, host: PluginHost) -> int:
    from .config import ConfigError, budget_problems, effective_config, render_plan

    path = ns.config or os.environ.get("SUPERVISOR_CONFIG")
    if not path:
        raise UsageError("check needs a configuration: -c FILE or SUPERVISOR_CONFIG")
    source = _read_source(path)
    reads = _Reads(os.environ)
    config = build_config(RunOptions(config_path=path, grace_period=ns.grace_period), reads)
    host.enable(config)
    problems = budget_problems(config)
    if problems:
        raise ConfigError(problems)
    if ns.effective:
        print(effective_config(config), end="")
    else:
        print(render_plan(config, host.hooks_by_phase()))
    if not ns.no_compile:
        sys.stdout.flush()  # the note follows the plan on a terminal
        print(f"{PROG} check: {_compile(path, source, reads.read, config)}", file=sys.stderr)
    return 0


def _read_source(path: str) -> bytes | None:
    try:
        with open(path, "rb") as file:
            return file.read()
    except OSError:
        return None  # load_config reports it


def _compile(path: str, source: bytes | None, environ: Mapping[str, str | None], config: Config) -> str:
    """Write (or remove) ``path``'s compiled plan; the sentence saying so."""
    from ._compiled import plan_path, recipe_of, remove_plan, write_plan

    recipe = recipe_of(config)
    if isinstance(recipe, str):
        removed = " (removed the one written before)" if remove_plan(path) else ""
        then = ", so the orchestrator starts it" if config.main is not None else ""
        return f"no compiled plan{removed}: {recipe}{then}"
    if source is None or _read_source(path) != source:
        return f"no compiled plan: {path} changed while it was being checked"
    try:
        written = write_plan(path, source, environ, recipe)
    except OSError as exc:
        return (
            f"warning: compiled plan not written ({exc.strerror or exc}: {plan_path(path)}); "
            "run starts the main process after loading the file"
        )
    return f"compiled plan written to {written}: run starts the main process before loading the file"


class _Reads(Mapping[str, str]):
    """An environment that remembers every variable looked up, and what it
    held: a compiled plan is good only while they hold the same."""

    def __init__(self, environ: Mapping[str, str]) -> None:
        self._environ = environ
        self.read: dict[str, str | None] = {}

    def __getitem__(self, name: str) -> str:
        self.read[name] = self._environ.get(name)
        return self._environ[name]

    def get(self, name: str, default: object = None) -> str | None:  # type: ignore[override]
        self.read[name] = value = self._environ.get(name)
        return value if value is not None else default  # type: ignore[return-value]

    def __contains__(self, name: object) -> bool:
        if isinstance(name, str):
            self.read[name] = self._environ.get(name)
        return name in self._environ

    def __iter__(self) -> Iterator[str]:
        # Every variable, so the file depends on all of them.
        self.read.update(self._environ)
        return iter(self._environ)

    def __len__(self) -> int:
        return len(self._environ)


def _plugins(host: PluginHost) -> int:
    entries = host.describe()
    if not entries:
        print("No plugins installed (entry-point group supervisor.plugins).")
    for entry in entries:
        print(entry)
    return 0
