"""The PID-1 core, through the real CLI as PID 1 of a new PID namespace."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from supervisor.pid1.state import wall_margin
from tests.core.children import IGNORE_TERM, SIGNAL_REPORTER
from tests.pid1 import (
    SUPERVISOR,
    UNSHARE,
    Supervisor,
    ended_at_the_wall,
    pid_alive,
    run,
    shell_wait,
    sigterm_at_start,
    wait_until,
)

PY = sys.executable


# -- exit codes ---------------------------------------------------------------


@pytest.mark.parametrize("code", [0, 1, 2, 3, 42, 100, 126, 127, 128, 200, 254, 255])
def test_exit_code_passes_through(code: int) -> None:
    status, sup = run(["--", "sh", "-c", f"exit {code}"])
    assert status == code, sup.output


@pytest.mark.parametrize(
    "signo", [signal.SIGHUP, signal.SIGINT, signal.SIGKILL, signal.SIGUSR1, signal.SIGSEGV, signal.SIGTERM]
)
def test_death_by_signal_is_128_plus_n(signo: int) -> None:
    status, sup = run(["--", "sh", "-c", f"kill -{int(signo)} $$"])
    assert status == 128 + signo, sup.output


def test_command_not_found_is_127() -> None:
    status, sup = run(["--", "/no/such/program"])
    assert status == 127
    assert "command not found" in sup.output


def test_not_executable_is_126(tmp_path: Path) -> None:
    script = tmp_path / "script.sh"
    script.write_text("#!/bin/sh\nexit 0\n")
    script.chmod(0o644)
    status, sup = run(["--", str(script)])
    assert status == 126, sup.output
    status, sup = run(["--", str(tmp_path)])  # a directory
    assert status == 126, sup.output


def test_stdin_is_passed_to_the_main_process() -> None:
    proc = subprocess.run(  # noqa: PLW1510 - the exit status is the assertion
        ["unshare", "-Urpf", "--mount-proc", "--kill-child", SUPERVISOR, "--", "sh"],
        input=b"exit 5\n",
        capture_output=True,
        timeout=30,
    )
    assert proc.returncode == 5, proc.stderr


# -- signals ------------------------------------------------------------------

FORWARDABLE = [
    s
    for s in range(1, 32)
    if s
    not in {
        signal.SIGKILL,
        signal.SIGSTOP,
        signal.SIGCHLD,
        signal.SIGTSTP,
        signal.SIGTTIN,
        signal.SIGTTOU,
        signal.SIGTERM,
        signal.SIGINT,
    }
]


def test_every_forwardable_signal_reaches_the_main_process() -> None:
    with Supervisor(["--", PY, "-c", SIGNAL_REPORTER]) as sup:
        sup.wait_for("^ready$", stream="stdout")
        for signo in FORWARDABLE:
            sup.signal(signo)
            # One at a time: identical pending signals coalesce in any kernel.
            sup.wait_for(f"^got {signo}$", stream="stdout")
        sup.signal(signal.SIGTERM)
        assert sup.wait() == 0
    got = [int(line.split()[1]) for line in sup.stdout_lines if line.startswith("got ")]
    assert got == [*FORWARDABLE, signal.SIGTERM]


def test_sigint_reaches_the_main_process_and_gives_130() -> None:
    with Supervisor(["--", PY, "-c", SIGNAL_REPORTER.replace("signal.SIGTERM:", "signal.SIGINT:")]) as sup:
        sup.wait_for("^ready$", stream="stdout")
        sup.signal(signal.SIGINT)
        sup.wait_for("^got 2$", stream="stdout")
        assert sup.wait() == 0


def test_rewrite_maps_and_drops_signals() -> None:
    args = [
        "-v",  # forwarding is logged at debug level only
        "--rewrite",
        "USR1:USR2",
        "--rewrite",
        "SIGHUP:0",
        "--rewrite",
        "15:3",
        "--",
        PY,
        "-c",
        SIGNAL_REPORTER.replace("signal.SIGTERM:", "signal.SIGQUIT:"),
    ]
    with Supervisor(args) as sup:
        sup.wait_for("^ready$", stream="stdout")
        sup.signal(signal.SIGHUP)  # dropped
        sup.wait_for("SIGHUP: dropped")
        sup.signal(signal.SIGUSR1)
        sup.wait_for(f"^got {int(signal.SIGUSR2)}$", stream="stdout")
        sup.signal(signal.SIGTERM)  # delivered to the main process as SIGQUIT
        sup.wait_for(f"^got {int(signal.SIGQUIT)}$", stream="stdout")
        assert sup.wait() == 0
    got = [int(line.split()[1]) for line in sup.stdout_lines if line.startswith("got ")]
    assert got == [signal.SIGUSR2, signal.SIGQUIT]


LOOP = "while :; do sleep 0.05; done"


def test_process_group_forwarding_reaches_the_whole_pipeline(tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    child = f"(trap 'echo sub >> {marker}; exit 0' USR1; echo sub ready; {LOOP}) &"
    # A shell runs a trap only once its foreground `sleep` has ended.  Had
    # the main process exited at once, the supervisor's sweep of leftover
    # processes could TERM the sub-shell before it ran its USR1 trap; so the
    # main process waits (bounded) until the sub-shell has written its line.
    main_trap = f"echo main >> {marker}; {shell_wait(f'grep -q sub {marker}')}; exit 0"
    script = f"trap '{main_trap}' USR1; {child} echo main ready; {LOOP}"
    with Supervisor(["-g", "--", "sh", "-c", script]) as sup:
        # Each shell prints its line after its trap is set.
        sup.wait_for("^main ready$", stream="stdout")
        sup.wait_for("^sub ready$", stream="stdout")
        sup.signal(signal.SIGUSR1)
        assert sup.wait() == 0  # the main process exits on USR1, and so does the supervisor
    assert sorted(marker.read_text().split()) == ["main", "sub"]


def test_without_process_group_only_the_main_process_is_signalled(tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    # The sub-shell records which signal reached it first: the sweep's TERM
    # once the main process has gone, or a USR1 that should never come.  A
    # shell runs pending traps in signal-number order, so a USR1 sent to it
    # would be recorded even if the TERM came before its trap ran.
    traps = f"trap 'echo sub-usr1 >> {marker}; exit 0' USR1; trap 'echo sub-term >> {marker}; exit 0' TERM"
    child = f"({traps}; echo sub ready; {LOOP}) &"
    script = f"trap 'echo main >> {marker}; exit 0' USR1; {child} echo main ready; wait"
    with Supervisor(["--", "sh", "-c", script]) as sup:
        sup.wait_for("^sub ready$", stream="stdout")
        sup.wait_for("^main ready$", stream="stdout")
        sup.signal(signal.SIGUSR1)
        assert sup.wait() == 0
    assert marker.read_text().split() == ["main", "sub-term"], sup.output


def _stop_a_child_ignoring_sigterm(*options: str) -> tuple[Supervisor, float]:
    """SIGTERM to a supervisor (1 s grace period, JSON log) whose only
    process ignores it; the ended supervisor (status 137) and how long
    after the signal it exited."""
    args = [*options, "--grace-period", "1s", "--log-format", "json", "--", PY, "-c", IGNORE_TERM]
    with Supervisor(args) as sup:
        sup.wait_for("^ready$", stream="stdout")
        sup.signal(signal.SIGTERM)
        sent = time.monotonic()
        assert sup.wait() == 137
        took = time.monotonic() - sent
    return sup, took


def test_child_ignoring_sigterm_is_killed_before_the_deadline_on_the_direct_path() -> None:
    # No configuration: PID 1 runs the command itself and escalates as the
    # orchestrator's plan would, the wall margin before the wall.
    sup, took = _stop_a_child_ignoring_sigterm()
    records = sup.json_records()
    # It waited for the grace period (less the margin: 50 ms), measured from
    # after the test's kill() returned, which a busy machine may delay; the
    # upper bound gives a loaded machine its slack.  Under load PID 1 may
    # wake only at the wall itself, which it holds too.
    assert 0.5 <= took < 5, took
    if ended_at_the_wall(records, "stop python"):
        return
    assert any("escalating: SIGKILL to python" in str(r["message"]) for r in records), records


def test_child_ignoring_sigterm_is_killed_at_the_deadline() -> None:
    sup, took = _stop_a_child_ignoring_sigterm("--control")
    records = sup.json_records()
    if ended_at_the_wall(records, "stop python"):
        # PID 1 held the wall at 1 s; what follows (kill, reap, exit) gets a
        # loaded machine's slack.  Without the wall, it would run for ever.
        assert took < 5, took
        return
    assert any("escalating: SIGKILL" in str(r["message"]) for r in records)
    timeline = sup.timeline()
    stop = next(step for step in timeline if step["phase"] == "stop")
    assert stop["outcome"] == "killed"
    # On the supervisor's own clock, from the SIGTERM's arrival (which may
    # come while the orchestrator is still starting: the stop then begins a
    # little later, but the deadline does not move).  The escalation comes
    # the wall margin (50 ms) before the 1 s wall and a trio deadline never
    # fires early, so the lower bound is tight but for the timeline's 0.1 ms
    # rounding of both figures; above, a busy machine may be late to kill
    # and reap, but not by half the grace period.
    killed_at = stop["start"] + stop["duration"]
    assert 1.0 - wall_margin(1.0) - 0.0002 <= killed_at < 1.5, timeline


def test_second_sigterm_escalates_at_once() -> None:
    with Supervisor(["-v", "--grace-period", "60s", "--", PY, "-c", IGNORE_TERM]) as sup:
        sup.wait_for("^ready$", stream="stdout")
        sup.signal(signal.SIGTERM)
        sup.wait_for("stopping")
        sent = time.monotonic()
        sup.signal(signal.SIGTERM)
        assert sup.wait(timeout=20) == 137
        assert time.monotonic() - sent < 10  # far from the 60 s grace period
    assert "received SIGTERM again" in sup.output


def test_sigterm_during_start_up_is_not_lost() -> None:
    # The init layer blocks signals first thing and forks the orchestrator,
    # which then spends ~100 ms importing trio, pluggy and yaml.  A SIGTERM
    # in that window must still give a graceful shutdown rather than vanish
    # (PID 1 of a namespace ignores signals it has no handler for).
    # --control: the orchestrator's path (without it PID 1 runs the command).
    status, sup = sigterm_at_start(["--control", "--", "sleep", "30"])
    # Lost, it would leave `sleep 30` running and this wait would time out.
    assert status == 128 + signal.SIGTERM, sup.output
    assert "shutting down: received SIGTERM" in sup.output


# -- reaping ------------------------------------------------------------------

# The zombies in the namespace, counted until there are none (PID 1 reaps
# the last orphans a moment after they exit) or for at most 20 s.
ZOMBIE_COUNT = r"""
import os
import time

def zombies():
    count = 0
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            count += state == "Z"
    return count

end = time.monotonic() + 20
while (left := zombies()) and time.monotonic() < end:
    time.sleep(0.01)
print("zombies", left)
"""


def test_a_thousand_orphans_are_reaped(tmp_path: Path) -> None:
    counter = tmp_path / "count.py"
    counter.write_text(ZOMBIE_COUNT)
    script = f"i=0; while [ $i -lt 1000 ]; do (true &) ; i=$((i+1)); done; {PY} {counter}"
    status, sup = run(["--", "sh", "-c", script], timeout=120)
    assert status == 0, sup.output
    assert "zombies 0" in sup.stdout_lines, sup.output


def test_exit_status_is_never_stolen_while_orphans_are_reaped() -> None:
    # The main process exits with 7 while a storm of orphans exits around it:
    # a reaper that raced the orchestrator's wait would report 0.
    script = "i=0; while [ $i -lt 200 ]; do (sleep 0.01 &) ; i=$((i+1)); done; exit 7"
    for _ in range(15):
        status, sup = run(["--", "sh", "-c", script])
        assert status == 7, sup.output


def test_daemonized_grandchild_gets_its_cleanup_time(tmp_path: Path) -> None:
    done, up = tmp_path / "done", tmp_path / "up"
    # Its clean-up takes half a second; it says "up" once its trap is set,
    # and the main process exits only then (else the sweep could come first).
    daemon = f"trap 'sleep 0.5; echo cleaned > {done}; exit 0' TERM; echo up > {up}; {LOOP}"
    script = f'setsid sh -c "{daemon}" & {shell_wait(f"[ -s {up} ]")}; exit 0'
    status, sup = run(["--grace-period", "5s", "--", "sh", "-c", script])
    assert status == 0, sup.output
    assert done.read_text().strip() == "cleaned", sup.output
    assert re.search(r"sweeping \d+ leftover process", sup.output)


def test_supervisor_killed_while_not_pid1_leaves_no_child() -> None:
    with Supervisor(["-v", "--grace-period", "3s", "--", "sleep", "1000"], pid1=False) as sup:
        match = sup.wait_for(r"started sleep \(pid (\d+)\)")
        child = int(match.group(1))
        assert pid_alive(child)
        sup.proc.kill()
        sup.proc.wait()
        wait_until(lambda: not pid_alive(child), timeout=10)


def test_not_pid1_still_reaps_orphans_as_subreaper(tmp_path: Path) -> None:
    go = tmp_path / "go"
    # The main process outlives its two orphans until the test has seen
    # both reaped (or 20 s have passed).
    script = f"(true &); (true &); echo spawned; {shell_wait(f'[ -e {go} ]')}"
    with Supervisor(["-v", "--", "sh", "-c", script], pid1=False) as sup:
        sup.wait_for("reaped orphan", timeout=20, count=2)
        go.touch()
        status = sup.wait()
    assert status == 0, sup.output
    assert "registered as child subreaper" in sup.output
    assert sup.output.count("reaped orphan") == 2, sup.output


# -- a clean start for children -------------------------------------------------


def _ignore_some_signals() -> None:
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR2})
    for signo in (signal.SIGHUP, signal.SIGUSR1, signal.SIGQUIT):
        signal.signal(signo, signal.SIG_IGN)


# glibc reserves signals 32 and 33 (no program can change them through libc);
# they are left as the caller gave them.
GLIBC_RESERVED = (1 << 31) | (1 << 32)


def test_children_start_with_empty_mask_and_default_dispositions() -> None:
    # The caller blocks and ignores a few signals, as nohup or a careless
    # shell would; none of that may reach the supervised process.
    proc = subprocess.run(  # noqa: PLW1510 - the output is the assertion
        [*UNSHARE, SUPERVISOR, "--", "sh", "-c", "exec grep -E '^Sig(Blk|Ign)' /proc/self/status"],
        preexec_fn=_ignore_some_signals,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 0, proc.stderr
    fields = dict(line.split() for line in proc.stdout.splitlines())
    assert int(fields["SigBlk:"], 16) == 0
    assert int(fields["SigIgn:"], 16) & ~GLIBC_RESERVED == 0


def test_descriptors_inherited_pass_through_and_own_ones_do_not_leak(tmp_path: Path) -> None:
    read_end, write_end = os.pipe()
    os.set_inheritable(write_end, True)
    try:
        status, sup = run(
            ["--", PY, "-c", "import os; print(' '.join(sorted(os.listdir('/proc/self/fd'), key=int)))"],
            pass_fds=[write_end],
            cwd=tmp_path,
        )
    finally:
        os.close(read_end)
        os.close(write_end)
    assert status == 0, sup.output
    fds = {int(fd) for fd in sup.stdout_lines[0].split()}
    assert write_end in fds
    # 0-2, the inherited one, and the one listdir itself opened: nothing else.
    assert len(fds - {0, 1, 2, write_end}) <= 1, fds


def test_children_keep_the_callers_working_directory(tmp_path: Path) -> None:
    status, sup = run(["--", "pwd"], cwd=tmp_path)
    assert status == 0
    assert sup.stdout_lines == [str(tmp_path)]


def test_shutdown_exits_promptly_after_the_last_process() -> None:
    # --control: the orchestrator's path, which logs a timeline.
    with Supervisor(["--control", "--", "sleep", "30"]) as sup:
        sup.wait_for("started sleep")
        sup.signal(signal.SIGTERM)
        assert sup.wait() == 143
    assert "shutdown timeline" in sup.output


@pytest.mark.parametrize("path", [[], ["--control"]], ids=["direct", "orchestrator"])
def test_a_stopped_main_process_is_continued_so_it_can_stop(path: list[str]) -> None:
    # On a busy machine the SIGSTOP may still be pending when the SIGTERM
    # comes: the process stops right after, and must be continued all the same.
    with Supervisor(
        [
            "-v",
            *path,
            "--grace-period",
            "10s",
            "--",
            "sh",
            "-c",
            "trap 'exit 0' TERM; echo up; while :; do sleep 0.02; done",
        ]
    ) as sup:
        match = sup.wait_for(r"started sh \(pid (\d+)\)")
        sup.wait_for("^up$", stream="stdout")
        inner_pid = int(match.group(1))
        # SIGSTOP the shell from inside the namespace (its PID there is inner_pid).
        subprocess.run(
            ["nsenter", "-t", str(sup.pid), "-p", "-U", "--preserve-credentials", "kill", "-STOP", str(inner_pid)],
            check=True,
        )
        sup.signal(signal.SIGTERM)
        assert sup.wait() == 0


def test_the_supervisors_own_broken_pipes_are_not_forwarded(tmp_path: Path) -> None:
    # The supervisor's log goes to a pipe whose reader is gone: its writes
    # raise SIGPIPE inside the supervisor.  That must not reach the main
    # process, while a SIGPIPE sent from outside still does.
    reader, writer = os.pipe()
    os.close(reader)
    try:
        proc = subprocess.Popen(
            [*UNSHARE, SUPERVISOR, "-v", "--", PY, "-c", SIGNAL_REPORTER],
            stdout=subprocess.PIPE,
            stderr=writer,
            text=True,
        )
    finally:
        os.close(writer)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        inner = int(Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()[0])
        os.kill(inner, signal.SIGUSR1)  # logs "forwarded", which hits the broken pipe
        assert proc.stdout.readline().strip() == f"got {int(signal.SIGUSR1)}"
        os.kill(inner, signal.SIGPIPE)
        assert proc.stdout.readline().strip() == f"got {int(signal.SIGPIPE)}"
        os.kill(inner, signal.SIGTERM)
        rest = proc.stdout.read().split()
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert rest == ["got", str(int(signal.SIGTERM))]


def test_signals_reach_a_main_process_started_before_the_orchestrator_was_ready() -> None:
    # `supervisor -- COMMAND` starts COMMAND before trio is imported; a signal
    # in that window is held and delivered once the process is supervised.
    # --control: the orchestrator's path (without it PID 1 runs the command).
    with Supervisor(["--control", "--", PY, "-c", SIGNAL_REPORTER]) as sup:
        # Its handler in place (a signal before that would kill it, under any
        # init), the main process is usually still ahead of the orchestrator's
        # imports: the signal is then held until the orchestrator supervises it.
        sup.wait_for("^ready$", stream="stdout")
        sup.signal(signal.SIGUSR2)
        sup.wait_for(f"^got {int(signal.SIGUSR2)}$", stream="stdout")
        sup.signal(signal.SIGTERM)
        assert sup.wait() == 0
