"""What every parser of the command line shares: mistakes as one line with a
"did you mean", option values that start with a dash, and a look inside a
parser for ``help``, ``--help`` and shell completion.

Stdlib only (argparse): the full command line (supervisor/cli.py) and the
control commands' client use it; it must start in milliseconds.  PID 1
parses the run command line without argparse (supervisor/pid1/options.py),
raising the same `UsageError`.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Sequence
from typing import NoReturn

from ._usage import UsageError, did_you_mean

__all__ = [
    "Parser",
    "UsageError",
    "describe_commands",
    "did_you_mean",
    "join_option_values",
    "option_strings",
    "subcommands",
]


class Parser(argparse.ArgumentParser):
    """argparse, but errors are one line naming the bad value, with the
    nearest subcommand or option when there is one, not a usage dump."""

    def error(self, message: str) -> NoReturn:
        command = re.match(r"argument COMMAND: invalid choice: '([^']*)'", message)
        if command is not None:
            word, names = command.group(1), list(subcommands(self))
            hint = did_you_mean(word, names) or f" (commands: {', '.join(names)})"
            raise UsageError(f"unknown command {word!r}{hint}")
        raise UsageError(message + self._suggestion(message))

    def _suggestion(self, message: str) -> str:
        unknown = re.match(r"unrecognized arguments: (.*)", message)
        if unknown is not None:
            options = [word for word in unknown.group(1).split() if word.startswith("-")]
            if options:
                return did_you_mean(options[0].partition("=")[0], option_strings(self))
        return ""


def option_strings(parser: argparse.ArgumentParser) -> list[str]:
    """Every option string of ``parser`` and its subcommands."""
    found = list(parser._option_string_actions)
    for _, sub in subcommands(parser).values():
        found += [option for option in sub._option_string_actions if option not in found]
    return found


def subcommands(parser: argparse.ArgumentParser) -> dict[str, tuple[str, argparse.ArgumentParser]]:
    """``parser``'s subcommands: name → (its one-line help, its parser)."""
    found: dict[str, tuple[str, argparse.ArgumentParser]] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
            for name, sub in action.choices.items():
                found[name] = (helps.get(name, ""), sub)
    return found


def describe_commands(parser: argparse.ArgumentParser) -> None:
    """Give each subcommand without a description its one line, as a
    sentence, so that ``supervisor COMMAND --help`` says what it is for."""
    for text, command in subcommands(parser).values():
        if not command.description and text:
            command.description = text[:1].upper() + text[1:] + "."


def join_option_values(args: Sequence[str], parser: argparse.ArgumentParser) -> list[str]:
    """``--grace-period -1s`` as ``--grace-period=-1s``: argparse takes a
    value that starts with a dash for an option and says "expected one
    argument"; joined, the value reaches its parser, whose message says
    what is wrong with it.  Stops at ``--``."""
    takes_value = {
        option
        for option, action in parser._option_string_actions.items()
        if action.nargs is None
        and not isinstance(action, argparse._StoreConstAction | argparse._CountAction)
        and option.startswith("--")
    }
    out: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            out += args[i:]
            break
        following = args[i + 1] if i + 1 < len(args) else None
        if arg in takes_value and following is not None and following.startswith("-") and following != "--":
            out.append(f"{arg}={following}")
            i += 2
            continue
        out.append(arg)
        i += 1
    return out
