"""The one run command line: PID 1 parses it, the orchestrator receives the
result, so combined short options mean the same in both processes."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from supervisor._cliparse import UsageError, join_option_values
from supervisor.pid1.options import OPTIONS, InfoRequested, _parse_options, parse_run_args, run_parser
from tests.core.children import SIGNAL_REPORTER
from tests.pid1 import SUPERVISOR, pid_alive, run, wait_until


@pytest.mark.parametrize(
    ("args", "verbose", "group"),
    [
        (["-vp", "TERM"], 1, False),
        (["-gpTERM"], 0, True),
        (["-vvgp", "TERM"], 2, True),
        (["-p", "TERM", "-v"], 1, False),
        (["--parent-death-signal=TERM"], 0, False),
        (["-pSIGTERM", "-g"], 0, True),
    ],
)
def test_combined_short_options(args: list[str], verbose: int, group: bool) -> None:
    options = parse_run_args([*args, "--", "app"])
    assert options.parent_death_signal == signal.SIGTERM
    assert options.verbose == verbose
    assert options.process_group is group
    assert options.command == ("app",)


def test_options_after_the_dashes_belong_to_the_command() -> None:
    options = parse_run_args(["-v", "--", "app", "-p", "TERM", "--grace-period", "1s"])
    assert options.parent_death_signal is None and options.grace_period is None
    assert options.command == ("app", "-p", "TERM", "--grace-period", "1s")


def test_shutdown_signals_take_a_list_of_names() -> None:
    assert parse_run_args(["--shutdown-signals", "QUIT,sigterm", "--", "a"]).shutdown_signals == {
        signal.SIGQUIT,
        signal.SIGTERM,
    }
    assert parse_run_args(["--", "a"]).shutdown_signals is None
    for bad in ("", "KILL", "TERM,NOPE"):
        with pytest.raises(UsageError):
            parse_run_args([f"--shutdown-signals={bad}", "--", "a"])


# PID 1 reads the table with its own small parser; what shows the options
# (--help, `supervisor help`, completion) is argparse made from the same
# table.  Both must read every command line alike: same values, same message.
SPELLINGS = [
    ["-vvg", "-c", "a.yaml"],
    ["-cfile.yaml", "-V"],
    ["-c=file.yaml", "-h"],
    ["--conf", "x.yaml", "--grace", "2s"],
    ["--grace-period", "-1s"],
    ["--grace", "-1s"],
    ["-e", "-1"],
    ["-e", "143", "-e143", "--expect-exit=0"],
    ["-p", "-TERM"],
    ["-p-TERM"],
    ["-vx"],
    ["-v=g", "--verb"],
    ["--verbose=2"],
    ["--control=1"],
    ["--con"],
    ["--ver"],
    ["--log", "json"],
    ["--log-format", "xml"],
    ["--log-level=debug", "--log-format", "json"],
    ["--rewrite", "TERM:QUIT", "--rewrite=HUP:0", "--process"],
    ["--rewrite", "KILL:0"],
    ["--shutdown-signals", "QUIT,TERM"],
    ["--shutdown-signal=STOP"],
    ["--bogus=1", "-g"],
    ["--grace-perod", "3s"],
    ["app", "-v", "--gracee"],
    ["-", "-1", "-a b"],
    ["-c"],
    ["-vc"],
    ["--grace-period", "--con"],
    ["-c", "--con"],
]


def _outcome(parse: Callable[[list[str]], object], args: list[str]) -> object:
    try:
        return parse(args)
    except UsageError as exc:
        return str(exc)


@pytest.mark.parametrize("args", SPELLINGS, ids=" ".join)
def test_pid1_reads_every_spelling_as_argparse_does(args: list[str]) -> None:
    parser = run_parser()
    ours = _outcome(_parse_options, args)
    theirs = _outcome(lambda a: vars(parser.parse_args(join_option_values(a, parser))), args)
    assert ours == theirs


def test_the_help_shows_every_option_of_the_one_table() -> None:
    text = run_parser().format_help()
    for option in OPTIONS:
        assert ", ".join(option.names) in text or option.names[0] in text, option.names
        assert option.help.split()[0] in text
    with pytest.raises(InfoRequested):
        parse_run_args(["-vh"])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-p", "NOPE", "--", "true"], "argument -p/--parent-death-signal: unknown signal 'NOPE'"),
        (["-vpNOPE", "--", "true"], "argument -p/--parent-death-signal: unknown signal 'NOPE'"),
        (["--shutdown-signals", "STOP", "--", "true"], "SIGSTOP cannot start the shutdown"),
        (["--grace-perod", "3s", "--", "true"], "arguments: --grace-perod 3s; did you mean '--grace-period'?"),
        (["--log", "json", "--", "true"], "ambiguous option: --log could match --log-format, --log-level"),
        (["-e", "-1", "--", "true"], "argument -e/--expect-exit: invalid exit code '-1'"),
        (["-vx", "--", "true"], "argument -v/--verbose: ignored explicit argument 'x'"),
    ],
)
def test_a_mistake_is_one_line_and_exit_2(args: list[str], message: str) -> None:
    status, sup = run(args, pid1=False)
    assert status == 2
    assert len(sup.stderr_lines) == 1 and message in sup.stderr_lines[0], sup.output
    assert sup.stderr_lines[0].endswith("(see supervisor --help)")


# The supervisor, not PID 1, started by a parent that prints its PID and is
# then SIGKILLed: -p TERM must turn that death into a shutdown.
_PARENT = (
    "import subprocess, sys, time\np = subprocess.Popen(sys.argv[1:])\nprint(p.pid, flush=True)\ntime.sleep(120)\n"
)


@pytest.mark.parametrize("form", [["-vp", "TERM"], ["-gpTERM"], ["-p", "TERM", "-v"], ["--parent-death-signal=TERM"]])
@pytest.mark.parametrize("path", ["direct", "orchestrator"])
def test_the_parent_death_signal_reaches_pid1_in_every_spelling(form: list[str], path: str, tmp_path: Path) -> None:
    extra = ["--control"] if path == "orchestrator" else []
    argv = [SUPERVISOR, *form, *extra, "--", sys.executable, "-c", SIGNAL_REPORTER]
    env = {**os.environ, "SUPERVISOR_SOCKET": str(tmp_path / "control.sock")}
    parent = subprocess.Popen(
        [sys.executable, "-c", _PARENT, *argv], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env
    )
    assert parent.stdout is not None
    supervisor = 0
    try:
        lines = _lines(parent.stdout.fileno())
        supervisor = int(next(lines))
        assert next(lines) == "ready"
        parent.kill()
        parent.wait()
        # The main process gets its stop signal (SIGTERM), reports it and exits.
        assert next(lines) == f"got {int(signal.SIGTERM)}"
        wait_until(lambda: not pid_alive(supervisor), timeout=20)
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        if supervisor and pid_alive(supervisor):
            os.kill(supervisor, signal.SIGKILL)
        parent.stdout.close()


def test_the_orchestrator_stops_the_processes_when_the_init_layer_is_killed(tmp_path: Path) -> None:
    """Not PID 1, the init layer can be SIGKILLed; the orchestrator then gets
    SIGTERM as its parent-death signal and runs the shutdown rather than
    leaving the processes running."""
    argv = [SUPERVISOR, "--control", "--", sys.executable, "-c", SIGNAL_REPORTER]
    env = {**os.environ, "SUPERVISOR_SOCKET": str(tmp_path / "control.sock")}
    init = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    assert init.stdout is not None
    started: list[int] = []  # the orchestrator, then its main process
    try:
        lines = _lines(init.stdout.fileno())
        assert next(lines) == "ready"
        started += _children(init.pid)
        started += _children(started[0])
        init.kill()
        init.wait()
        assert next(lines) == f"got {int(signal.SIGTERM)}"
        wait_until(lambda: not pid_alive(started[0]), timeout=20)
    finally:
        if init.poll() is None:
            init.kill()
            init.wait()
        for pid in started:
            if pid_alive(pid):
                os.kill(pid, signal.SIGKILL)
        init.stdout.close()


def _children(pid: int) -> list[int]:
    """Every thread's children (trio may start a process from a worker thread)."""
    return [
        int(child) for task in Path(f"/proc/{pid}/task").iterdir() for child in (task / "children").read_text().split()
    ]


def _lines(fd: int, timeout: float = 20) -> Iterator[str]:
    """Lines from ``fd`` as they come; StopIteration at EOF or the timeout."""
    buffer = b""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            yield line.decode()
        ready, _, _ = select.select([fd], [], [], max(0.0, end - time.monotonic()))
        if not ready:
            break
        data = os.read(fd, 4096)
        if not data:
            break
        buffer += data
