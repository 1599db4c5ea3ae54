"""The run command line: one table of options, parsed once, by PID 1.

``supervisor [run] [OPTIONS] [-- COMMAND [ARG...]]``.  PID 1 parses it before
anything else and hands the result (`RunOptions`) to the orchestrator it
forks, so both processes act on the same values: ``-vp TERM``, ``-gpTERM``
and ``--parent-death-signal=TERM`` mean one thing everywhere.

`OPTIONS` is the one declaration.  PID 1 reads it with the small parser
below, which follows argparse's rules (combined short options, a value
attached or separate, ``--opt=value``, unique prefixes of long options) and
its one-line messages; `run_parser` makes an argparse parser of the same
table for what shows the options (``--help``, ``supervisor help``, the shell
completion), in the process that shows them.  Not argparse in PID 1: with
the ``re``, ``gettext`` and ``shutil`` it brings (and ``shutil``'s
compression modules), it was a third of PID 1's start-up and memory beyond
the Python floor.
"""

from __future__ import annotations

import os

from .._units import (
    FORWARDABLE_SIGNALS,
    parse_grace_period,
    parse_shutdown_signal,
    parse_signal,
    signal_name,
)
from .._usage import UsageError, did_you_mean

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import Any

    from .._cliparse import Parser

__all__ = [
    "OPTIONS",
    "PROG",
    "InfoRequested",
    "Option",
    "RunOptions",
    "grace_period_argument",
    "parse_run_args",
    "run_parser",
]

PROG = "supervisor"


class RunOptions:
    """What the run command line asked for (None: not given)."""

    __slots__ = (
        "command",
        "config_path",
        "control",
        "grace_period",
        "log_format",
        "log_level",
        "parent_death_signal",
        "process_group",
        "rewrite",
        "shutdown_signals",
        "verbose",
        "zero_exit_codes",
    )

    def __init__(  # noqa: PLR0913 - one keyword per option, none positional
        self,
        *,
        config_path: str | None = None,
        grace_period: float | None = None,
        rewrite: dict[int, int] | None = None,
        process_group: bool = False,
        log_format: str | None = None,
        log_level: str | None = None,
        verbose: int = 0,
        zero_exit_codes: frozenset[int] = frozenset(),
        parent_death_signal: int | None = None,
        shutdown_signals: frozenset[int] | None = None,
        control: bool = False,
        command: tuple[str, ...] = (),
    ) -> None:
        self.config_path = config_path
        self.grace_period = grace_period
        self.rewrite: dict[int, int] = rewrite if rewrite is not None else {}
        self.process_group = process_group
        self.log_format = log_format
        self.log_level = log_level
        self.verbose = verbose
        self.zero_exit_codes = zero_exit_codes
        self.parent_death_signal = parent_death_signal
        self.shutdown_signals = shutdown_signals
        self.control = control
        """--control: the control socket even without a configuration (which
        takes the orchestrator's path)."""
        self.command = command

    @property
    def needs_orchestrator(self) -> bool:
        """False for the plain ``supervisor -- COMMAND``: PID 1 runs the
        command itself (see supervisor/pid1/direct.py)."""
        return self.config_path is not None or self.control

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__slots__)
        return f"RunOptions({fields})"


class InfoRequested(Exception):
    """``--help`` or ``--version``: print it, start nothing."""

    def __init__(self, what: str) -> None:
        super().__init__(what)
        self.what = what


# -- the values' parsers: ValueError says what is wrong -----------------------------


def _rewrite(text: str) -> tuple[int, int]:
    source, sep, target = text.partition(":")
    if not sep:
        raise ValueError(f"invalid rewrite {text!r}: use FROM:TO, e.g. TERM:QUIT or 15:0")
    try:
        pair = parse_signal(source), parse_signal(target, allow_zero=True)
    except ValueError as exc:
        raise ValueError(f"invalid rewrite {text!r}: {exc}") from None
    if pair[0] not in FORWARDABLE_SIGNALS:
        # KILL/STOP cannot be caught, CHLD is the reaper's, TSTP/TTIN/TTOU are
        # job control the supervisor swallows: a rule for them would never apply.
        raise ValueError(
            f"invalid rewrite {text!r}: {signal_name(pair[0])} is never forwarded, so it cannot be rewritten"
        )
    return pair


def _signal_list(text: str) -> frozenset[int]:
    names = [name for name in text.split(",") if name.strip()]
    if not names:
        raise ValueError(f"invalid signal list {text!r}: name at least one signal, e.g. QUIT,TERM")
    return frozenset(parse_shutdown_signal(name) for name in names)


def _exit_code(text: str) -> int:
    if not text.isdigit() or int(text) > 255:
        raise ValueError(f"invalid exit code {text!r}: use a number from 0 to 255")
    return int(text)


# -- the table ---------------------------------------------------------------------

# What an option does, as argparse's actions: store_true, count, store, append.
FLAG, COUNT, VALUE, APPEND = "flag", "count", "value", "append"


class Option:
    """One option: its spellings (short first), what it does, its value's
    parser (ValueError: the message), and its line of help."""

    __slots__ = ("choices", "dest", "help", "kind", "metavar", "names", "parse")

    def __init__(
        self,
        names: tuple[str, ...],
        help: str,
        *,
        kind: str = FLAG,
        metavar: str | None = None,
        parse: Callable[[str], Any] | None = None,
        choices: tuple[str, ...] = (),
    ) -> None:
        self.names = names
        self.dest = names[-1].lstrip("-").replace("-", "_")
        self.help = help
        self.kind = kind
        self.metavar = metavar
        self.parse = parse
        self.choices = choices

    @property
    def takes_value(self) -> bool:
        return self.kind in (VALUE, APPEND)

    def initial(self) -> Any:
        """The value when the option is not given."""
        return {FLAG: False, COUNT: 0, APPEND: []}.get(self.kind)

    def convert(self, text: str) -> Any:
        """The value of ``text``; UsageError names the option, as argparse does."""
        try:
            value = text if self.parse is None else self.parse(text)
        except ValueError as exc:
            raise UsageError(f"argument {'/'.join(self.names)}: {exc}") from None
        if self.choices and value not in self.choices:
            choices = ", ".join(repr(choice) for choice in self.choices)
            raise UsageError(f"argument {'/'.join(self.names)}: invalid choice: {text!r} (choose from {choices})")
        return value


OPTIONS = (
    Option(("-h", "--help"), "show this help and exit"),
    Option(("-V", "--version"), "print the version and exit"),
    Option(("-c", "--config"), "YAML configuration (env SUPERVISOR_CONFIG)", kind=VALUE, metavar="FILE"),
    Option(
        ("--grace-period",),
        "the whole shutdown budget, a hard wall: then PID 1 kills what is left "
        "(default 30s, or the file's grace_period); 30, 30s, 500ms, 1.5s, 2m",
        kind=VALUE,
        metavar="DURATION",
        parse=parse_grace_period,
    ),
    Option(
        ("--shutdown-signals",),
        "the signals that start the shutdown, comma-separated, e.g. QUIT,TERM to match an image's "
        "STOPSIGNAL (default TERM,INT, or the file's shutdown_signals); others are forwarded",
        kind=VALUE,
        metavar="LIST",
        parse=_signal_list,
    ),
    Option(
        ("--rewrite",),
        "deliver signal FROM to the main process as TO (names or numbers; TO=0 drops it); repeatable",
        kind=APPEND,
        metavar="FROM:TO",
        parse=_rewrite,
    ),
    Option(("-g", "--process-group"), "forward signals to the main process's whole process group"),
    Option(
        ("-e", "--expect-exit"),
        "report the main process's exit code CODE as 0 (e.g. 143 for a JVM stopped by SIGTERM); repeatable",
        kind=APPEND,
        metavar="CODE",
        parse=_exit_code,
    ),
    Option(
        ("-p", "--parent-death-signal"),
        "when not PID 1: act as if SIGNAL arrived when the supervisor's parent dies (e.g. TERM)",
        kind=VALUE,
        metavar="SIGNAL",
        parse=parse_signal,
    ),
    Option(("--control",), "serve the control socket (supervisor status, stop, ...) also without a configuration"),
    Option(("--log-format",), "log line format (default text)", kind=VALUE, choices=("text", "json")),
    Option(
        ("--log-level",),
        "least severe log lines shown (default info, or the file's log.level)",
        kind=VALUE,
        choices=("debug", "info", "warning", "error"),
    ),
    Option(("-v", "--verbose"), "log more (debug level)", kind=COUNT),
)

_BY_NAME = {name: option for option in OPTIONS for name in option.names}

DESCRIPTION = (
    "A PID 1 for containers: runs COMMAND and the processes of a YAML "
    "configuration, reaps zombies, forwards signals, and turns SIGTERM into a graceful "
    "shutdown plan that finishes inside the grace period."
)
_USAGE = f"{PROG} [run] [OPTIONS] [-- COMMAND [ARG...]]\n       {PROG} COMMAND [ARGS...]  (see `{PROG} help COMMAND`)"
_EPILOG = (
    "Exit status: the main process's exit code, 128+N if signal N killed it, "
    "137 also when the grace period ran out and PID 1 killed what was left, "
    "127 command not found, 126 not executable, 70 a supervised process failed, "
    "2 usage or configuration error."
)


# -- parsing -----------------------------------------------------------------------


def parse_run_args(args: Sequence[str]) -> RunOptions:
    """The run command line; raises UsageError (one line says what is
    wrong) or InfoRequested."""
    args = list(args)
    if args and args[0] == "run":
        args = args[1:]
    command: list[str] = []
    if "--" in args:
        split = args.index("--")
        args, command = args[:split], args[split + 1 :]
    values = _parse_options(args)
    if values["help"]:
        raise InfoRequested("help")
    if values["version"]:
        raise InfoRequested("version")
    config_path = values["config"] or os.environ.get("SUPERVISOR_CONFIG") or None
    if command and not command[0]:
        raise UsageError("the command after -- is an empty string: give a program to run")
    if not command and not config_path:
        raise UsageError("nothing to run: give a command after -- or a configuration with -c FILE")
    return RunOptions(
        config_path=config_path,
        grace_period=values["grace_period"],
        rewrite=dict(values["rewrite"]),
        process_group=values["process_group"],
        log_format=values["log_format"],
        log_level=values["log_level"],
        verbose=values["verbose"],
        zero_exit_codes=frozenset(values["expect_exit"]),
        parent_death_signal=values["parent_death_signal"],
        shutdown_signals=values["shutdown_signals"],
        control=values["control"],
        command=tuple(command),
    )


def _parse_options(args: list[str]) -> dict[str, Any]:
    """Each option's value by its ``dest``, by argparse's rules: options in
    any order, the last value wins (``append`` options collect them), and
    anything that is not an option is an error once all were read."""
    _check_prefixes(args)
    values = {option.dest: option.initial() for option in OPTIONS}
    extras: list[str] = []
    pending = args[::-1]
    while pending:
        arg = pending.pop()
        found = _lookup(arg) if arg.startswith("-") else None
        if found is None:
            extras.append(arg)
            continue
        option, attached = _take_flags(values, *found, spelled_long=arg.startswith("--"))
        if option.takes_value:
            text = attached if attached is not None else _separate_value(option, arg, pending)
            value = option.convert(text)
            values[option.dest] = [*values[option.dest], value] if option.kind == APPEND else value
    if extras:
        text = " ".join(extras)
        words = [word for word in text.split() if word.startswith("-")]
        hint = did_you_mean(words[0].partition("=")[0], _BY_NAME) if words else ""
        raise UsageError(f"unrecognized arguments: {text}{hint}")
    return values


def _check_prefixes(args: list[str]) -> None:
    """argparse says first if a word is an ambiguous prefix (any word but
    the value of a long option spelled out)."""
    words = iter(args)
    for arg in words:
        if _spelled_out(arg):
            next(words, None)
        elif arg.startswith("-"):
            _lookup(arg)


def _take_flags(
    values: dict[str, Any], option: Option, attached: str | None, *, spelled_long: bool
) -> tuple[Option, str | None]:
    """Set the flags of ``-vvg...``; the option that takes a value after
    them (with the rest of the word as its value), or the last flag."""
    while not option.takes_value:
        values[option.dest] = values[option.dest] + 1 if option.kind == COUNT else True
        if attached is None:
            break
        # `-vp TERM`: the letters after a short flag are more short
        # options; after a long one (`--verbose=2`) or an unknown letter
        # they are a mistake.
        following = _BY_NAME.get(f"-{attached[:1]}")
        if spelled_long or not attached or following is None:
            raise UsageError(f"argument {'/'.join(option.names)}: ignored explicit argument {attached!r}")
        option, attached = following, attached[1:] or None
    return option, attached


def _separate_value(option: Option, arg: str, pending: list[str]) -> str:
    """The next word, as ``option``'s value.  It may start with a dash after
    a long option spelled out (`--grace-period -1s`: its parser then says
    what is wrong with it); after a short one it must not look like an
    option."""
    if not pending or (not _spelled_out(arg) and _looks_like_option(pending[-1])):
        raise UsageError(f"argument {'/'.join(option.names)}: expected one argument")
    return pending.pop()


def _lookup(arg: str) -> tuple[Option, str | None] | None:
    """The option ``arg`` names and the value attached to it, if any:
    ``--config``, ``--config=FILE``, ``--conf`` (a unique prefix), ``-c``,
    ``-cFILE``, ``-c=FILE``, ``-vc`` (``-v``, then ``c`` to read on); None
    when it names none."""
    exact = _BY_NAME.get(arg)
    if exact is not None:
        return exact, None
    name, equals, value = arg.partition("=")
    if equals and name in _BY_NAME:
        return _BY_NAME[name], value
    if len(arg) < 2:
        return None
    if arg.startswith("--"):
        matches = [known for known in _BY_NAME if known.startswith(name)]
        attached = value if equals else None
    else:
        matches = [arg[:2]] if arg[:2] in _BY_NAME else []
        attached = arg[2:]
    if len(matches) > 1:
        raise UsageError(f"ambiguous option: {arg} could match {', '.join(matches)}")
    return (_BY_NAME[matches[0]], attached) if matches else None


def _spelled_out(arg: str) -> bool:
    """Whether ``arg`` is a long option that takes a value, spelled out:
    the next word is its value, whatever it looks like."""
    option = _BY_NAME.get(arg)
    return option is not None and option.takes_value and arg.startswith("--")


def _looks_like_option(arg: str) -> bool:
    """argparse's test of the word after an option: a dash and more, but
    not a negative number (``-e -1``: the value -1, which its parser then
    refuses), nor words with a space that name no option."""
    if not arg.startswith("-") or arg == "-" or _is_negative_number(arg):
        return False
    return " " not in arg or _lookup(arg) is not None


def _is_negative_number(arg: str) -> bool:
    """``-1``, ``-1.5``, ``-.5``."""
    whole, dot, fraction = arg[1:].partition(".")
    if not dot:
        return whole.isdigit()
    return (not whole or whole.isdigit()) and fraction.isdigit()


# -- what shows the options ----------------------------------------------------------


def _argparse_type(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """An argparse type from a parser whose ValueError has the whole story."""

    def convert(text: str) -> Any:
        try:
            return parse(text)
        except ValueError as exc:
            import argparse

            raise argparse.ArgumentTypeError(str(exc)) from None

    return convert


grace_period_argument = _argparse_type(parse_grace_period)


def run_parser() -> Parser:
    """`OPTIONS` as an argparse parser: for the help, ``supervisor help`` and
    the shell completion (supervisor/cli.py), never for PID 1's own parse."""
    from .._cliparse import Parser

    parser = Parser(prog=PROG, usage=_USAGE, description=DESCRIPTION, epilog=_EPILOG, add_help=False)
    for option in OPTIONS:
        settings: dict[str, Any] = {"help": option.help}
        if option.kind == FLAG:
            settings["action"] = "store_true"
        elif option.kind == COUNT:
            settings.update(action="count", default=0)
        else:
            if option.metavar is not None:
                settings["metavar"] = option.metavar
            if option.choices:
                settings["choices"] = option.choices
            if option.parse is not None:
                settings["type"] = _argparse_type(option.parse)
            if option.kind == APPEND:
                settings.update(action="append", default=[])
        parser.add_argument(*option.names, **settings)
    return parser
