"""``supervisor completion bash|zsh``: a completion script made from the parser.

Everything the script knows comes from ``supervisor.cli.command_parser``:
the commands, each one's options, the choices of an option or argument,
which options take a file, and which arguments are process names.  Process
names come from the running supervisor when the user presses Tab
(``supervisor completion --names``, which asks the control socket and
prints nothing when there is no supervisor to ask).  zsh runs the same
script through its ``bashcompinit``.
"""

from __future__ import annotations

import argparse
import shlex

from ._cliparse import subcommands

__all__ = ["process_names", "script"]

# Positional arguments with this metavar are process names.
_NAME = "NAME"
# Options whose value is a path.
_PATH_METAVARS = {"FILE", "PATH"}


def process_names() -> int:
    """Print the running supervisor's process names, one per line; nothing
    (and status 0) when it cannot be reached: a completion must not print
    errors into the user's command line."""
    from .control.client import ControlClient, RequestFailed, SupervisorUnreachable

    try:
        answer = ControlClient(timeout=2.0).request({"command": "status"})
    except (SupervisorUnreachable, RequestFailed):
        return 0
    for process in answer.get("processes", []):
        print(process.get("name", ""))
    return 0


def script(parser: argparse.ArgumentParser, shell: str) -> str:
    body = _bash(parser)
    if shell == "zsh":
        return "autoload -U +X compinit && compinit\nautoload -U +X bashcompinit && bashcompinit\n" + body
    return body


def _words(items: list[str]) -> str:
    return shlex.quote(" ".join(items))


def _bash(parser: argparse.ArgumentParser) -> str:
    commands = subcommands(parser)
    run = commands["run"][1]
    cases = []
    for name, (_, command) in commands.items():
        options = [o for o in command._option_string_actions if o.startswith("-")]
        takes_names = any(not a.option_strings and a.metavar == _NAME for a in command._actions)
        positional = next(
            (list(a.choices) for a in command._actions if not a.option_strings and a.choices is not None), []
        )
        if any(not a.option_strings and a.metavar == "COMMAND" for a in command._actions):
            positional = list(commands)  # `help COMMAND`
        cases.append(
            f"        {shlex.quote(name)}) opts={_words(options)}; names={int(takes_names)}; "
            f"words={_words([str(c) for c in positional])} ;;"
        )
    values = []
    for action in {id(a): a for _, c in commands.values() for a in c._actions}.values():
        if not action.option_strings or action.nargs == 0:
            continue
        pattern = "|".join(action.option_strings)
        if action.choices is not None:
            choices = [str(c) for c in action.choices]
            values.append(f'        {pattern}) COMPREPLY=($(compgen -W {_words(choices)} -- "$cur")); return ;;')
        elif action.metavar in _PATH_METAVARS:
            values.append(f'        {pattern}) COMPREPLY=($(compgen -f -- "$cur")); return ;;')
        else:
            values.append(f"        {pattern}) return ;;")
    takes_value = sorted(
        {
            o
            for _, c in commands.values()
            for a in c._actions
            if a.option_strings and a.nargs != 0
            for o in a.option_strings
        }
    )
    return _TEMPLATE.format(
        commands=_words(list(commands)),
        run_options=_words([o for o in run._option_string_actions if o.startswith("-")]),
        takes_value="|".join(takes_value),
        cases="\n".join(cases),
        values="\n".join(sorted(set(values))),
    )


_TEMPLATE = """\
# supervisor completion (bash; zsh through bashcompinit), made by `supervisor completion`.
_supervisor() {{
    local cur prev cmd i opts names words
    cur="${{COMP_WORDS[COMP_CWORD]}}"
    prev="${{COMP_WORDS[COMP_CWORD-1]}}"
    cmd=""
    for ((i = 1; i < COMP_CWORD; i++)); do
        case "${{COMP_WORDS[i]}}" in
            --) return ;;
            {takes_value}) ((i++)) ;;
            -*) ;;
            *) cmd="${{COMP_WORDS[i]}}"; break ;;
        esac
    done
    case "$prev" in
{values}
    esac
    opts="" names=0 words=""
    case "$cmd" in
        "")
            if [[ "$cur" == -* ]]; then
                COMPREPLY=($(compgen -W {run_options} -- "$cur"))
            else
                COMPREPLY=($(compgen -W {commands} -- "$cur"))
            fi
            return ;;
{cases}
    esac
    if [[ "$cur" == -* ]]; then
        COMPREPLY=($(compgen -W "$opts" -- "$cur"))
    elif [[ $names == 1 ]]; then
        COMPREPLY=($(compgen -W "$(supervisor completion --names 2>/dev/null)" -- "$cur"))
    else
        COMPREPLY=($(compgen -W "$words" -- "$cur"))
    fi
}}
complete -o bashdefault -o default -F _supervisor supervisor
"""
