"""The run command line: one definition, parsed once, by PID 1.

``supervisor [run] [OPTIONS] [-- COMMAND [ARG...]]``.  PID 1 parses it before
anything else and hands the result (`RunOptions`) to the orchestrator it
forks, so both processes act on the same values: ``-vp TERM``, ``-gpTERM``
and ``--parent-death-signal=TERM`` mean one thing everywhere.  The help,
``supervisor help`` and the shell completion are made from the same parser.

Stdlib only (argparse: about 1.5 ms of PID 1's start).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Sequence
from typing import NamedTuple, TypeVar

from .._cliparse import Parser, UsageError, join_option_values
from .._units import (
    FORWARDABLE_SIGNALS,
    parse_grace_period,
    parse_shutdown_signal,
    parse_signal,
    signal_name,
)

__all__ = ["PROG", "InfoRequested", "RunOptions", "parse_run_args", "run_parser"]

PROG = "supervisor"
T = TypeVar("T")


class RunOptions(NamedTuple):
    """What the run command line asked for (None: not given)."""

    config_path: str | None = None
    grace_period: float | None = None
    rewrite: dict[int, int] = {}  # noqa: RUF012 - never changed after parsing
    process_group: bool = False
    log_format: str | None = None
    log_level: str | None = None
    verbose: int = 0
    zero_exit_codes: frozenset[int] = frozenset()
    parent_death_signal: int | None = None
    shutdown_signals: frozenset[int] | None = None
    control: bool = False
    """--control: the control socket even without a configuration (which
    takes the orchestrator's path)."""
    command: tuple[str, ...] = ()

    @property
    def needs_orchestrator(self) -> bool:
        """False for the plain ``supervisor -- COMMAND``: PID 1 runs the
        command itself (see supervisor/pid1/direct.py)."""
        return self.config_path is not None or self.control


class InfoRequested(Exception):
    """``--help`` or ``--version``: print it, start nothing."""

    def __init__(self, what: str) -> None:
        super().__init__(what)
        self.what = what


def _argument(parse: Callable[[str], T]) -> Callable[[str], T]:
    """An argparse type from a parser that raises ValueError with the whole story."""

    def convert(text: str) -> T:
        try:
            return parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return convert


grace_period_argument = _argument(parse_grace_period)
_signal = _argument(parse_signal)


def _rewrite(text: str) -> tuple[int, int]:
    source, sep, target = text.partition(":")
    if not sep:
        raise argparse.ArgumentTypeError(f"invalid rewrite {text!r}: use FROM:TO, e.g. TERM:QUIT or 15:0")
    try:
        pair = parse_signal(source), parse_signal(target, allow_zero=True)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"invalid rewrite {text!r}: {exc}") from None
    if pair[0] not in FORWARDABLE_SIGNALS:
        # KILL/STOP cannot be caught, CHLD is the reaper's, TSTP/TTIN/TTOU are
        # job control the supervisor swallows: a rule for them would never apply.
        raise argparse.ArgumentTypeError(
            f"invalid rewrite {text!r}: {signal_name(pair[0])} is never forwarded, so it cannot be rewritten"
        )
    return pair


def _signal_list(text: str) -> frozenset[int]:
    names = [name for name in text.split(",") if name.strip()]
    if not names:
        raise argparse.ArgumentTypeError(f"invalid signal list {text!r}: name at least one signal, e.g. QUIT,TERM")
    try:
        return frozenset(parse_shutdown_signal(name) for name in names)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _exit_code(text: str) -> int:
    if not text.isdigit() or int(text) > 255:
        raise argparse.ArgumentTypeError(f"invalid exit code {text!r}: use a number from 0 to 255")
    return int(text)


DESCRIPTION = (
    "A PID 1 for containers: runs COMMAND and the processes of a YAML "
    "configuration, reaps zombies, forwards signals, and turns SIGTERM into a graceful "
    "shutdown plan that finishes inside the grace period."
)


def run_parser() -> Parser:
    parser = Parser(
        prog=PROG,
        usage=f"{PROG} [run] [OPTIONS] [-- COMMAND [ARG...]]\n       {PROG} COMMAND [ARGS...]  "
        f"(see `{PROG} help COMMAND`)",
        description=DESCRIPTION,
        epilog="Exit status: the main process's exit code, 128+N if signal N killed it, "
        "137 also when the grace period ran out and PID 1 killed what was left, "
        "127 command not found, 126 not executable, 70 a supervised process failed, "
        "2 usage or configuration error.",
        add_help=False,
    )
    parser.add_argument("-h", "--help", action="store_true", help="show this help and exit")
    parser.add_argument("-V", "--version", action="store_true", help="print the version and exit")
    parser.add_argument("-c", "--config", metavar="FILE", help="YAML configuration (env SUPERVISOR_CONFIG)")
    parser.add_argument(
        "--grace-period",
        metavar="DURATION",
        type=grace_period_argument,
        help="the whole shutdown budget, a hard wall: then PID 1 kills what is left "
        "(default 30s, or the file's grace_period); "
        "30, 30s, 500ms, 1.5s, 2m",
    )
    parser.add_argument(
        "--shutdown-signals",
        metavar="LIST",
        type=_signal_list,
        help="the signals that start the shutdown, comma-separated, e.g. QUIT,TERM to match an image's "
        "STOPSIGNAL (default TERM,INT, or the file's shutdown_signals); others are forwarded",
    )
    parser.add_argument(
        "--rewrite",
        metavar="FROM:TO",
        type=_rewrite,
        action="append",
        default=[],
        help="deliver signal FROM to the main process as TO (names or numbers; TO=0 drops it); repeatable",
    )
    parser.add_argument(
        "-g", "--process-group", action="store_true", help="forward signals to the main process's whole process group"
    )
    parser.add_argument(
        "-e",
        "--expect-exit",
        metavar="CODE",
        type=_exit_code,
        action="append",
        default=[],
        help="report the main process's exit code CODE as 0 (e.g. 143 for a JVM stopped by SIGTERM); repeatable",
    )
    parser.add_argument(
        "-p",
        "--parent-death-signal",
        metavar="SIGNAL",
        type=_signal,
        help="when not PID 1: act as if SIGNAL arrived when the supervisor's parent dies (e.g. TERM)",
    )
    parser.add_argument(
        "--control",
        action="store_true",
        help="serve the control socket (supervisor status, stop, ...) also without a configuration",
    )
    parser.add_argument("--log-format", choices=["text", "json"], help="log line format (default text)")
    parser.add_argument(
        "--log-level",
        choices=["debug", "info", "warning", "error"],
        help="least severe log lines shown (default info, or the file's log.level)",
    )
    parser.add_argument("-v", "--verbose", action="count", default=0, help="log more (debug level)")
    return parser


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
    parser = run_parser()
    ns = parser.parse_args(join_option_values(args, parser))
    if ns.help:
        raise InfoRequested("help")
    if ns.version:
        raise InfoRequested("version")
    config_path = ns.config or os.environ.get("SUPERVISOR_CONFIG") or None
    if command and not command[0]:
        raise UsageError("the command after -- is an empty string: give a program to run")
    if not command and not config_path:
        raise UsageError("nothing to run: give a command after -- or a configuration with -c FILE")
    return RunOptions(
        config_path=config_path,
        grace_period=ns.grace_period,
        rewrite=dict(ns.rewrite),
        process_group=ns.process_group,
        log_format=ns.log_format,
        log_level=ns.log_level,
        verbose=ns.verbose,
        zero_exit_codes=frozenset(ns.expect_exit),
        parent_death_signal=ns.parent_death_signal,
        shutdown_signals=ns.shutdown_signals,
        control=ns.control,
        command=tuple(command),
    )
