"""``supervisor status|start|stop|restart|signal|logs|health|replan``: the CLI's side
of the control socket.

Stdlib only and no trio: these run inside ``kubectl exec`` (and ``health``
as an exec probe, every few seconds), so they must start in milliseconds.
Every failure is one line on stderr: 1 for a refused request or a supervisor
that cannot be reached, 2 for a usage mistake (as everywhere in this CLI);
``health`` exits 1 when the answer is "not healthy".
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import json
import os
import socket
import sys
from collections.abc import Iterator, Sequence
from typing import Any

from .._cliparse import Parser as _Parser
from .._cliparse import UsageError as _Usage
from .._cliparse import describe_commands
from .._units import format_duration
from ..pid1.exits import ExitCode
from .present import STATE_STYLES, Colours, format_log_line, json_line, only_processes, parse_since
from .protocol import SOCKET_ENV, client_candidates, peer_uid, server_trusted

__all__ = ["ControlClient", "SupervisorUnreachable", "control_parser", "main"]

PROG = "supervisor"
FAILED = 1
_TIMEOUT = 30.0  # for an answer; start/stop wait for the process, up to its stop_timeout


class SupervisorUnreachable(Exception):
    """No supervisor to talk to; the message says why, on one line."""


class RequestFailed(Exception):
    """The supervisor refused the request; the message is its answer."""


class ControlClient:
    """One request per connection (see ``supervisor.control.protocol``)."""

    def __init__(self, path: str | None = None, timeout: float | None = _TIMEOUT) -> None:
        self.path = path
        self.timeout = timeout

    def _connect(self) -> socket.socket:
        explicit = bool(self.path or os.environ.get(SOCKET_ENV))
        candidates = [self.path] if self.path else client_candidates()
        missing = []
        for path in candidates:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(self.timeout)
            try:
                sock.connect(path)
            except FileNotFoundError:
                sock.close()
                missing.append(path)
                continue
            except OSError as exc:
                sock.close()
                raise SupervisorUnreachable(_connect_error(path, exc)) from None
            server = peer_uid(sock)
            if server is None or not server_trusted(server, path, explicit=explicit):
                sock.close()
                raise SupervisorUnreachable(
                    f"{path} is served by uid {server}, not by root or by you (uid {os.getuid()}): "
                    "not a supervisor to trust; is someone else's program listening there?"
                )
            return sock
        where = " or ".join(missing)
        raise SupervisorUnreachable(
            f"no control socket at {where}: is the supervisor running here? "
            f"(a socket configured elsewhere: --socket PATH or {SOCKET_ENV}=PATH)"
        )

    def stream(self, request: dict[str, Any]) -> Iterator[dict[str, Any]]:
        """Send ``request``; yield every answer object as it arrives."""
        sock = self._connect()
        with sock:
            try:
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    # (Refused: the answer saying why is still there to read.)
                    sock.sendall((json.dumps(request) + "\n").encode())
                with sock.makefile("rb") as answers:
                    for raw in answers:
                        message = json.loads(raw)
                        if isinstance(message, dict):
                            yield message
            except TimeoutError:
                raise SupervisorUnreachable(
                    f"no answer from the supervisor within {format_duration(_TIMEOUT)}"
                ) from None
            except (OSError, ValueError) as exc:
                raise SupervisorUnreachable(f"the supervisor's answer was cut short: {exc}") from None

    def request(self, request: dict[str, Any]) -> dict[str, Any]:
        """Send ``request``; return its one answer, raise RequestFailed for a refusal."""
        for message in self.stream(request):
            if message.get("ok") is False:
                raise RequestFailed(str(message.get("error", "refused")))
            return message
        raise SupervisorUnreachable("the supervisor closed the connection without an answer")


def _connect_error(path: str, exc: OSError) -> str:
    if exc.errno in (errno.EACCES, errno.EPERM):
        try:
            owner = os.stat(path).st_uid
        except OSError:
            return f"permission denied: {path}: run as root or as the user the supervisor runs as"
        you = os.getuid()
        return f"permission denied: {path} belongs to uid {owner}; run as root or as uid {owner} (you are uid {you})"
    if exc.errno == errno.ECONNREFUSED:
        return f"no supervisor is listening on {path} (left over from one that has exited?)"
    if isinstance(exc, TimeoutError):
        return f"the supervisor did not accept the connection on {path} within {format_duration(_TIMEOUT)}"
    return f"cannot connect to {path}: {exc.strerror or exc}"


# --------------------------------------------------------------------------
# The command line
# --------------------------------------------------------------------------


def control_parser() -> _Parser:
    parser = _Parser(prog=PROG, description="Operate a running supervisor over its control socket.")
    common = _Parser(add_help=False)
    common.add_argument(
        "--socket", metavar="PATH", help=f"the control socket (default: ${SOCKET_ENV}, then the usual places)"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser, required=True)

    def command(name: str, text: str) -> _Parser:
        return sub.add_parser(name, help=text, parents=[common])

    status = command("status", "one row per process, the health checks and any shutdown under way")
    status.add_argument("names", nargs="*", metavar="NAME", help="only these processes (default: every one)")
    status.add_argument(
        "-o", "--output", choices=["text", "json"], default="text", help="a table (default), or the answer as JSON"
    )
    for name, text in (("start", "start stopped processes"), ("stop", "stop processes (they stay stopped)")):
        command(name, text).add_argument("names", nargs="+", metavar="NAME", help="a process of the configuration")
    command("restart", "stop, then start processes (not the main process)").add_argument(
        "names", nargs="+", metavar="NAME", help="a process of the configuration"
    )
    sig = command("signal", "send a signal to a process (its process group if it has one)")
    sig.add_argument("name", metavar="NAME", help="the process to signal")
    sig.add_argument("signal", metavar="SIGNAL", help="HUP, SIGHUP, hup or 1")
    logs = command("logs", "recent output lines (every process, or NAME's)")
    logs.add_argument("name", nargs="?", metavar="NAME", help="the process whose lines to show (default: every one)")
    logs.add_argument("-n", "--lines", type=_count, default=10, metavar="N", help="how many (default 10)")
    logs.add_argument("-f", "--follow", action="store_true", help="keep printing new lines")
    logs.add_argument(
        "-t", "--timestamps", action="store_true", help="begin each line with its time (UTC) and stream (stdout/stderr)"
    )
    logs.add_argument(
        "--since", metavar="WHEN", type=_since, help="only lines since then: a duration ago (10m) or a time (ISO 8601)"
    )
    logs.add_argument(
        "-o", "--output", choices=["text", "json"], default="text", help="text (default) or one JSON object per line"
    )
    health = command("health", "exit 0 if healthy, 1 if not (for exec probes)")
    health.add_argument(
        "--level", choices=["alive", "ready"], default="ready", help="the question the probe asks (default ready)"
    )
    health.add_argument("-q", "--quiet", action="store_true", help="print nothing, only the exit status")
    replan = command(
        "replan",
        "read the configuration file again and start, stop and restart what changed (the rest is left alone)",
    )
    replan.add_argument("-n", "--dry-run", action="store_true", help="show the changes, change nothing")
    describe_commands(parser)
    return parser


def _since(text: str) -> float:
    try:
        return parse_since(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _count(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"expected a number of lines, got {text!r}")
    return int(text)


def main(args: Sequence[str]) -> int:
    """Entry for the control subcommands (the CLI routes them here)."""
    try:
        ns = control_parser().parse_args(list(args))
    except _Usage as exc:
        print(f"{PROG}: {exc} (see {PROG} {args[0] if args else ''} --help)", file=sys.stderr)
        return ExitCode.USAGE
    # start/stop/restart take as long as the process's readiness timeout or
    # stop_timeout, which the supervisor enforces; a follow has no end.
    waits = ns.command in ("start", "stop", "restart", "replan") or (ns.command == "logs" and ns.follow)
    client = ControlClient(ns.socket or None, timeout=None if waits else _TIMEOUT)
    try:
        return _run(ns, client)
    except SupervisorUnreachable as exc:
        print(f"{PROG} {ns.command}: {exc}", file=sys.stderr)
        return FAILED
    except RequestFailed as exc:
        print(f"{PROG} {ns.command}: {exc}", file=sys.stderr)
        return FAILED
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def _run(ns: argparse.Namespace, client: ControlClient) -> int:
    command = ns.command
    if command == "status":
        return _status(ns, client)
    if command in ("start", "stop", "restart"):
        answer = client.request({"command": command, "names": ns.names})
        for message in answer.get("messages", []):
            print(message)
        return 0
    if command == "signal":
        answer = client.request({"command": "signal", "name": ns.name, "signal": ns.signal})
        for message in answer.get("messages", []):
            print(message)
        return 0
    if command == "logs":
        return _logs(ns, client)
    if command == "replan":
        return _replan(ns, client)
    answer = client.request({"command": "health", "level": ns.level})
    healthy = bool(answer.get("healthy"))
    if not ns.quiet:
        if healthy:
            print(f"{ns.level}: ok")
        else:
            print(f"{ns.level}: failing: " + "; ".join(answer.get("reasons", [])))
    return 0 if healthy else FAILED


def _replan(ns: argparse.Namespace, client: ControlClient) -> int:
    """The changes, then what was done; an invalid file: its problems, one
    per line with their positions (nothing changed), and exit 2 as for
    `supervisor check`."""
    for answer in client.stream({"command": "replan", "dry_run": ns.dry_run}):
        if answer.get("ok") is False:
            problems = answer.get("problems")
            if not problems:
                raise RequestFailed(str(answer.get("error", "refused")))
            for problem in problems:
                print(problem, file=sys.stderr)
            print(f"{PROG} replan: {answer.get('error')}", file=sys.stderr)
            return ExitCode.USAGE
        changes = answer.get("changes", [])
        for line in changes:
            print(line)
        if not any(line[:1] in "+-~!" for line in changes):
            print("nothing to change")
        elif ns.dry_run:
            print("(dry run: nothing was changed)")
        for message in answer.get("messages", []):
            print(message)
        return 0
    raise SupervisorUnreachable("the supervisor closed the connection without an answer")


def _status(ns: argparse.Namespace, client: ControlClient) -> int:
    try:
        answer = only_processes(client.request({"command": "status"}), ns.names)
    except ValueError as exc:
        raise RequestFailed(str(exc)) from None
    if ns.output == "json":
        print(json.dumps(answer, indent=2))
    else:
        print(render_status(answer, Colours(sys.stdout)), end="")
    return 0


def _logs(ns: argparse.Namespace, client: ControlClient) -> int:
    request = {"command": "logs", "name": ns.name, "lines": ns.lines, "follow": ns.follow}
    if ns.since is not None:
        request["since"] = ns.since
    many = ns.name is None
    out = sys.stdout
    colours = Colours(out)
    for message in client.stream(request):
        if message.get("ok") is False:
            raise RequestFailed(str(message.get("error")))
        if "dropped" in message:
            print(f"supervisor logs: {message['dropped']} line(s) skipped: this client fell behind", file=sys.stderr)
        if "line" in message:
            if ns.output == "json":
                out.write(json_line(message) + "\n")
            else:
                out.write(format_log_line(message, many=many, timestamps=ns.timestamps, colours=colours) + "\n")
            if ns.follow:
                out.flush()
        if message.get("ok") is True:
            break
    return 0


# --------------------------------------------------------------------------
# The status table
# --------------------------------------------------------------------------

_COLUMNS = ("NAME", "STATE", "PID", "UPTIME", "RESTARTS", "LAST EXIT", "READY", "CHECKS")


def render_status(answer: dict[str, Any], colours: Colours | None = None) -> str:
    """The text of ``supervisor status``: a header, one row per process,
    plugin lines, the shutdown if one is under way."""
    me = answer.get("supervisor", {})
    paint = colours.paint if colours is not None else (lambda text, style: text)
    alive = "alive" if answer.get("alive") else paint("NOT ALIVE", "red")
    verdicts = f"{alive}, {'ready' if answer.get('ready') else paint('not ready', 'yellow')}"
    lines = [f"supervisor {me.get('version', '?')} (pid {me.get('pid', '?')}), up {_age(me.get('uptime'))}: {verdicts}"]
    rows = [list(_COLUMNS)]
    for process in answer.get("processes", []):
        rows.append(_status_row(process))
    widths = [max(len(row[i]) for row in rows) for i in range(len(_COLUMNS))]
    for number, row in enumerate(rows):
        cells = [cell.ljust(width) for cell, width in zip(row, widths, strict=True)]
        # Painted after the padding: the escapes take no room on the screen.
        if number:
            cells[1] = paint(cells[1], STATE_STYLES.get(row[1]))
        lines.append("  ".join(cells).rstrip())
    pod_checks = [check for check in answer.get("checks", []) if check.get("process") is None]
    for check in pod_checks:
        lines.append(f"check {check['name']} ({check['level']}): {_check_word(check)}")
    for plugin, text in answer.get("plugins", {}).items():
        lines.append(f"{plugin}: {text}")
    shutdown = answer.get("shutdown")
    if shutdown:
        lines.append(
            f"shutting down: {shutdown['reason']}; {format_duration(shutdown['elapsed'])} in, "
            f"phase {shutdown['phase']}, {format_duration(shutdown['deadline_left'])} left before SIGKILL"
        )
    return "\n".join(lines) + "\n"


def _status_row(process: dict[str, Any]) -> list[str]:
    name = process["name"] + (" (main)" if process.get("main") else "")
    pid = str(process["pid"]) if process.get("pid") else "-"
    restarts = str(process.get("restarts_in_window", 0))
    if process.get("restarts", 0) != process.get("restarts_in_window", 0):
        restarts += f" ({process['restarts']} in all)"
    checks = ", ".join(f"{check['name']}: {_check_word(check)}" for check in process.get("checks", [])) or "-"
    return [
        name,
        process["state"],
        pid,
        _age(process.get("uptime")),
        restarts,
        process.get("last_exit") or "-",
        process.get("readiness") or "-",
        checks,
    ]


def _check_word(check: dict[str, Any]) -> str:
    if check.get("up") is True:
        return "up"
    if check.get("up") is None:
        return "not probed yet" if not check.get("failures") else f"failing ({check['failures']}x)"
    detail = f": {check['detail']}" if check.get("detail") else ""
    return f"down ({check.get('failures')}x{detail})"


def _age(seconds: object) -> str:
    """How long something has been up, for a table column read at a glance
    (kubectl's AGE does the same): at most two units, rounded down — 42s,
    3m05s, 2h10m, 1d02h.  Not ``format_duration``, which writes a duration
    the way the configuration does, for ``parse_duration`` to read back:
    an uptime of "7325s" helps nobody scanning ``supervisor status``."""
    if not isinstance(seconds, int | float):
        return "-"
    whole = int(seconds)
    if whole < 60:
        return f"{seconds:.1f}s" if seconds < 10 else f"{whole}s"
    minutes, secs = divmod(whole, 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours}h{minutes:02d}m"
    return f"{hours // 24}d{hours % 24:02d}h"
