"""The command line: pick a subcommand, turn user mistakes into one line.

``supervisor [run] [OPTIONS] [-- COMMAND [ARG...]]`` runs in the orchestrator
process (supervisor/_run.py), forked by PID 1, which parsed the options
(supervisor/pid1/options.py) and hands them over as they are; ``check``,
``plugins``, ``--version``, ``--help`` and plugin-provided subcommands run
here, in-process.  Every usage or
configuration error is one line on stderr and exit status 2, before anything
is started.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, cast

from . import __version__
from ._cliparse import Parser as _Parser
from ._cliparse import UsageError, describe_commands, did_you_mean, join_option_values, subcommands
from ._run import build_config, config_error, usage_error
from .pid1.options import DESCRIPTION, PROG, RunOptions, grace_period_argument, run_parser

if TYPE_CHECKING:
    from ._pluginhost import PluginHost
    from .config import Config

__all__ = ["RunOptions", "UsageError", "main", "print_info"]


def print_info(what: str) -> int:
    """``supervisor --help`` or ``--version`` (PID 1 routes them here)."""
    if what == "version":
        print(f"{PROG} (pid1-supervisor) {__version__}")
    else:
        print(overview(), end="")
    return 0


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
        return usage_error(str(exc))
    except ConfigError as exc:
        return config_error(exc)


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
