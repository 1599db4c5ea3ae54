"""The console script: route ``supervisor ...`` to what runs it.

``supervisor [run] ...`` makes this process PID 1's init layer
(supervisor/pid1/); ``status``, ``health`` and the other control commands
run the control socket's stdlib-only client; ``check``, ``plugins``, ``help``
and plugin subcommands run the full command line (supervisor/cli.py).  The
run command line is parsed here, once, by the one parser
(supervisor/pid1/options.py): a mistake is one line and exit status 2 before
anything starts.
"""

from __future__ import annotations

import os
import signal
import sys

from .pid1.init import BLOCKED, inherited_fds, reset_ignored_signals

# Not `typing.TYPE_CHECKING`: PID 1 imports nothing the Python floor does
# not (docs/architecture.md); type checkers know a variable of this name.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import NoReturn

__all__ = ["ALLOW_PYTHONPATH_ENV", "main"]

# The image's explicit choice to let PYTHONPATH and the user's site
# directory reach the supervisor itself (plugins installed with pip --target).
ALLOW_PYTHONPATH_ENV = "SUPERVISOR_ALLOW_PYTHONPATH"

_RUN_COMMAND = "run"


def main() -> NoReturn:
    """Console-script entry point."""
    _isolate()
    caller_mask: set[int] = set(signal.pthread_sigmask(signal.SIG_BLOCK, BLOCKED))
    reset_ignored_signals()
    args = sys.argv[1:]
    if args and not args[0].startswith("-") and args[0] != _RUN_COMMAND:
        # check, plugins, help, plugin subcommands: an ordinary program.
        signal.pthread_sigmask(signal.SIG_SETMASK, caller_mask)
        sys.exit(_subcommand(args))
    _exit(_run(args, caller_mask))


def _subcommand(args: list[str]) -> int:
    from .control.protocol import COMMANDS

    if args[0] in COMMANDS:
        # supervisor status, health...: the control socket's client,
        # without even the CLI module's imports (exec probes run it
        # every few seconds).
        from .control.client import main as control_main

        return control_main(args)
    from .cli import main as cli_main

    return cli_main(args)


def _run(args: list[str], caller_mask: set[int]) -> int:
    from ._usage import UsageError
    from .pid1.options import PROG, InfoRequested, parse_run_args

    try:
        options = parse_run_args(args)
    except UsageError as exc:
        print(f"{PROG}: {exc} (see {PROG} --help)", file=sys.stderr)
        return 2
    except InfoRequested as request:
        signal.pthread_sigmask(signal.SIG_SETMASK, caller_mask)
        from .cli import print_info

        return print_info(request.what)
    if options.needs_orchestrator:
        from .pid1.orchestrated import OrchestratorInit

        return OrchestratorInit(options, inherited_fds=inherited_fds()).run()
    from .pid1.direct import DirectInit

    return DirectInit(options, inherited_fds=inherited_fds()).run()


def _exit(code: int) -> NoReturn:
    # Everything is done; interpreter shutdown would only delay the exit
    # (about 7 ms), and with it the container's end.
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
    os._exit(code)


def _isolate() -> None:
    """Run as ``python -I``: start again with that flag when PYTHONPATH or a
    user site directory could decide what this process imports.

    The supervisor runs as root while the directories on PYTHONPATH may be
    the application's, writable by its dropped user: a ``json.py`` there
    would run as root in every ``supervisor health`` exec probe, and a
    ``.dist-info`` would replace a plugin.  The environment is not changed:
    the processes started get PYTHONPATH as configured.  Nothing of the
    package has run yet but its first imports; ``python -I -m supervisor``
    (or ``-I`` in the script's first line, as the image has) isolates from
    the first byte.
    """
    if sys.flags.isolated or os.environ.get(ALLOW_PYTHONPATH_ENV) == "1":
        return
    import site  # frozen and already imported at start-up: costs nothing

    user_site = site.ENABLE_USER_SITE and site.USER_SITE in sys.path
    if not (os.environ.get("PYTHONPATH") or user_site):
        return
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    flags = "-I" + "O" * sys.flags.optimize  # -OO stays: the image's flags are -IOO
    if spec is not None and spec.name.endswith("__main__"):  # python -m supervisor
        again = [sys.executable, flags, "-m", spec.name.removesuffix(".__main__"), *sys.argv[1:]]
    else:  # the console script
        again = [sys.executable, flags, sys.argv[0], *sys.argv[1:]]
    os.execv(sys.executable, again)
