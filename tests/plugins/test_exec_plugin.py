"""The exec plugin with real subprocesses: output in the log, exit codes,
timeouts that stop the whole process group, concurrency, the deadline."""

from __future__ import annotations

import contextlib
import importlib.metadata
import logging
import os
import re
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
import supervisor_exec
import trio

from supervisor import Deadline, ExitStatus
from tests.pid1 import pid_alive, wait_until
from tests.plugins._helpers import (
    FakeProcess,
    LogRecords,
    call_every_phase,
    configure,
    configure_problems,
    make_context,
)

PROCESSES = """\
grace_period: 30s
processes:
  - {name: web, command: "true", main: true}
  - {name: worker, command: "true"}
"""


_WEB = ", process: web"


def _config(commands: str) -> str:
    return PROCESSES + "plugins:\n  exec:\n    commands:\n" + commands


async def _run(
    tmp_path: Path,
    commands: str,
    phase: str = "pre_stop",
    deadline: Deadline | None = None,
    **kw: object,
) -> tuple[list[supervisor_exec.Result], LogRecords, object]:
    settings, config = configure(supervisor_exec.plugin, tmp_path, _config(commands), "exec")
    ctx = make_context("exec", settings, config)
    with LogRecords.capture("exec") as logs:
        results = await supervisor_exec.run_phase(ctx, phase, deadline or Deadline(30), **kw)  # type: ignore[arg-type]
    return results, logs, ctx


@pytest.fixture
def leftovers() -> Iterator[list[int]]:
    """Process groups a test leaves behind on purpose; killed at the end."""
    groups: list[int] = []
    yield groups
    for pgid in groups:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)


async def test_output_goes_to_the_log_line_by_line(tmp_path: Path) -> None:
    results, logs, ctx = await _run(
        tmp_path,
        """\
      - phase: pre_stop
        name: greet
        command: ["sh", "-c", "echo first; echo second >&2; printf 'no newline'"]
""",
    )
    assert [r.outcome for r in results] == ["ok"]
    assert results[0].status == ExitStatus(code=0)
    assert logs.at(logging.INFO)[1:4] == ["greet: first", "greet: second", "greet: no newline"]
    assert logs.messages[-1].startswith("greet: exited with code 0 after ")
    (step,) = ctx.timeline.steps  # type: ignore[attr-defined]
    assert (step.phase, step.name, step.plugin, step.outcome) == ("pre_stop", "greet", "exec", "ok")


async def test_a_string_command_is_split_like_a_shell_and_named_after_itself(
    tmp_path: Path,
) -> None:
    results, logs, _ = await _run(tmp_path, "      - {phase: pre_stop, command: \"echo 'a b'  c\"}\n")
    assert results[0].outcome == "ok"
    assert "echo 'a b' c: a b c" in logs.messages


async def test_non_zero_exit_is_reported_not_raised(tmp_path: Path) -> None:
    results, logs, ctx = await _run(
        tmp_path,
        "      - {phase: post_stop, name: fails, command: 'sh -c \"exit 3\"'}\n",
        "post_stop",
    )
    assert results[0].outcome == "error"
    assert results[0].status == ExitStatus(code=3)
    assert any(m.startswith("fails: exited with code 3") for m in logs.at(logging.WARNING))
    (step,) = ctx.timeline.steps  # type: ignore[attr-defined]
    assert (step.outcome, step.detail) == ("error", "exited with code 3")


async def test_a_missing_program_is_reported_and_the_others_still_run(tmp_path: Path) -> None:
    results, logs, _ = await _run(
        tmp_path,
        """\
      - {phase: pre_stop, name: typo, command: ngnix -s quit}
      - {phase: pre_stop, name: good, command: "true"}
""",
    )
    assert [r.outcome for r in results] == ["error", "ok"]
    assert results[0].detail == "cannot start: No such file or directory: ngnix"
    assert "typo: cannot start: No such file or directory: ngnix" in logs.at(logging.ERROR)


async def test_commands_of_a_phase_run_concurrently(tmp_path: Path) -> None:
    # Each command checks in and waits until all four have: one after
    # another, the first would wait until its timeout.
    here = tmp_path / "here"
    here.mkdir()
    wait_for_all = f"touch {here}/$0; until [ $(ls {here} | wc -l) -ge 4 ]; do sleep 0.01; done"
    results, _, _ = await _run(
        tmp_path,
        "".join(
            f"      - {{phase: pre_stop, name: s{i}, timeout: 20s, command: [sh, -c, '{wait_for_all}', s{i}]}}\n"
            for i in range(4)
        ),
    )
    assert [r.outcome for r in results] == ["ok"] * 4


async def test_timeout_terminates_the_command(tmp_path: Path) -> None:
    start = trio.current_time()
    results, logs, ctx = await _run(
        tmp_path, "      - {phase: pre_stop, name: slow, command: sleep 30, timeout: 300ms}\n"
    )
    assert 0.3 <= trio.current_time() - start < 10
    assert results[0].outcome == "timeout"
    assert results[0].detail == "after 300ms, terminated"
    assert "slow: timed out after 300ms; terminated" in logs.at(logging.WARNING)
    assert ctx.timeline.steps[0].outcome == "timeout"  # type: ignore[attr-defined]


async def test_timeout_kills_a_command_that_ignores_sigterm_and_its_children(
    tmp_path: Path, leftovers: list[int]
) -> None:
    # The script ignores TERM and starts a grandchild that does too; both
    # must be gone after kill_after, because the whole group gets SIGKILL.
    start = trio.current_time()
    # ($$$$ is the shell's $$: the configuration reads $$ as an escaped $.)
    results, logs, _ = await _run(
        tmp_path,
        """\
      - phase: pre_stop
        name: stubborn
        timeout: 500ms
        kill_after: 300ms
        command:
          - sh
          - -c
          - |
            trap '' TERM
            sh -c 'trap "" TERM; echo child $$$$; sleep 30' &
            echo leader $$$$
            wait
""",
    )
    pids = [int(m.group(1)) for m in (re.search(r"(?:leader|child) (\d+)$", x) for x in logs.messages) if m]
    leftovers.extend(pids)
    assert 0.8 <= trio.current_time() - start < 10  # timeout + kill_after, then SIGKILL
    assert results[0].outcome == "timeout"
    assert results[0].detail == "after 500ms, killed"
    assert len(pids) == 2, logs.messages
    wait_until(lambda: not any(pid_alive(p) for p in pids), timeout=5)


async def test_deadline_cancels_a_running_command_and_stops_it(tmp_path: Path, leftovers: list[int]) -> None:
    # No timeout of its own: the shutdown deadline (1 s, less the reserve) bounds it.
    start = trio.current_time()
    results, logs, ctx = await _run(
        tmp_path,
        "      - {phase: pre_stop, name: forever, command: sleep 30}\n",
        deadline=Deadline(1.0),
    )
    pid = int(re.search(r"pid (\d+)", logs.messages[0]).group(1))  # type: ignore[union-attr]
    leftovers.append(pid)
    assert 0.9 <= trio.current_time() - start < 10  # 1 s less the reserve, then the stop
    assert results == []  # cancelled, so no result
    assert "forever: cancelled by the shutdown deadline; stopping it" in logs.at(logging.WARNING)
    assert ctx.timeline.steps[0].outcome == "cancelled"  # type: ignore[attr-defined]
    assert not pid_alive(pid)


async def test_background_children_do_not_hold_up_the_phase(tmp_path: Path, leftovers: list[int]) -> None:
    # The daemon keeps the output pipe open; the phase ends anyway once the
    # command itself has exited (after a short wait for its last output).
    start = trio.current_time()
    results, logs, _ = await _run(
        tmp_path,
        "      - {phase: startup, name: daemonize, command: [sh, -c, 'sleep 30 & echo started']}\n",
        "startup",
        None,
    )
    leftovers.append(int(re.search(r"pid (\d+)", logs.messages[0]).group(1)))  # type: ignore[union-attr]
    assert results[0].outcome == "ok"
    assert "daemonize: started" in logs.messages
    assert trio.current_time() - start < 20  # not the daemon's 30 s


async def test_env_cwd_and_supervisor_variables(tmp_path: Path) -> None:
    results, logs, _ = await _run(
        tmp_path,
        f"""\
      - phase: after_process_stop
        process: web
        name: show
        env: {{GREETING: hello, PORT: 8080}}
        cwd: {tmp_path}
        command:
          - sh
          - -c
          - >-
            echo "$GREETING $PORT $(pwd) $SUPERVISOR_PHASE
            $SUPERVISOR_PROCESS $SUPERVISOR_EXIT_CODE"
""",
        "after_process_stop",
        process=FakeProcess("web"),
        status=ExitStatus(signal=15),
    )
    assert results[0].outcome == "ok"
    assert f"show: hello 8080 {tmp_path} after_process_stop web 143" in logs.messages


async def test_deadline_time_left_is_passed_on(tmp_path: Path) -> None:
    _, logs, _ = await _run(
        tmp_path,
        "      - {phase: pre_stop, name: left, command: 'sh -c \"echo $SUPERVISOR_TIME_LEFT\"'}\n",
    )
    (value,) = [m.removeprefix("left: ") for m in logs.messages if re.fullmatch(r"left: [\d.]+", m)]
    left = float(value)
    assert 20 < left <= 29  # 30 s budget, 1 s reserve, less the time to start it


async def test_per_process_commands_run_only_around_their_process(tmp_path: Path) -> None:
    commands = """\
      - {phase: before_process_stop, process: web, name: web-only, command: "true"}
      - {phase: before_process_stop, process: worker, name: worker-only, command: "true"}
"""
    results, logs, _ = await _run(tmp_path, commands, "before_process_stop", process=FakeProcess("worker"))
    assert len(results) == 1
    assert any(m.startswith("worker-only: exited") for m in logs.messages)
    assert not any(m.startswith("web-only") for m in logs.messages)
    results, _, _ = await _run(tmp_path, commands, "pre_stop")
    assert results == []


async def test_long_lines_are_cut_into_readable_records(tmp_path: Path) -> None:
    _, logs, _ = await _run(
        tmp_path,
        "      - {phase: pre_stop, name: wide, command: [python3, -c, 'print(\"x\" * 20000)']}\n",
    )
    pieces = [m for m in logs.messages if m.startswith("wide: x")]
    assert [len(p) - len("wide: ") for p in pieces] == [8192, 8192, 3616]


async def test_hooks_dispatch_to_their_phase(tmp_path: Path) -> None:
    settings, config = configure(
        supervisor_exec.plugin,
        tmp_path,
        _config(
            "".join(
                f"      - {{phase: {p}, name: {p}, command: 'true'{_WEB if 'proc' in p else ''}}}\n"
                for p in supervisor_exec.PHASES
            )
        ),
        "exec",
    )
    ctx = make_context("exec", settings, config)
    await call_every_phase(supervisor_exec.plugin, ctx, process=FakeProcess("web"), status=ExitStatus(code=0))
    steps = ctx.timeline.steps
    assert [(s.phase, s.name, s.outcome) for s in steps] == [(p, p, "ok") for p in supervisor_exec.PHASES]


def test_settings_problems_are_reported_at_their_positions(tmp_path: Path) -> None:
    problems = configure_problems(
        supervisor_exec.plugin,
        tmp_path,
        _config(
            """\
      - {phase: pre_stopp, command: "true"}
      - {phase: before_process_stop, command: "true"}
      - {phase: after_process_stop, process: wbe, command: "true"}
      - {phase: pre_stop, process: web, command: "true"}
      - {phase: post_stop}
      - {phase: post_stop, command: "true", timeout: soon, kill_afer: 1s}
      - {phase: post_stop, command: "echo 'unbalanced"}
"""
        ),
        "exec",
    )
    base = str(tmp_path / "cfg.yaml")
    assert [p.removeprefix(base) for p in problems] == [
        ":8:17: plugins.exec.commands[0].phase: expected one of startup, shutdown_started, "
        "pre_stop, wind_down, "
        "before_process_stop, after_process_stop, post_stop, got 'pre_stopp'",
        ":9:9: plugins.exec.commands[1]: missing required key 'process' "
        "(before_process_stop commands belong to a process)",
        ":10:46: plugins.exec.commands[2].process: unknown process 'wbe' (processes: web, worker)",
        ":11:36: plugins.exec.commands[3].process: only before_process_stop and after_process_stop "
        "commands belong to a process, not pre_stop",
        ":12:9: plugins.exec.commands[4]: missing required key 'command'",
        ":13:54: plugins.exec.commands[5].timeout: invalid duration 'soon': "
        "use a number of seconds or a "
        "number with ms, s, m or h (30, 30s, 500ms, 1.5s, 2m)",
        ":13:60: unknown key 'kill_afer' in plugins.exec.commands[5] (did you mean 'kill_after'?)",
        ":14:37: plugins.exec.commands[6].command: "
        "cannot split the command line: No closing quotation "
        "(or write it as a list)",
    ]


def test_commands_are_required(tmp_path: Path) -> None:
    problems = configure_problems(supervisor_exec.plugin, tmp_path, "plugins:\n  exec: {}\n", "exec")
    assert problems == [
        f"{tmp_path}/cfg.yaml:2:9: plugins.exec: missing required key 'commands' (a list of commands to run)"
    ]


def test_registered_as_an_entry_point() -> None:
    (entry,) = [ep for ep in importlib.metadata.entry_points(group="supervisor.plugins") if ep.name == "exec"]
    assert entry.load() is supervisor_exec.plugin


async def test_cancelled_by_the_main_process_exit(tmp_path: Path, leftovers: list[int]) -> None:
    # The host cancels pre_stop hooks when the main process exits: nothing
    # is left to drain.  The command is stopped and the log says why.
    settings, config = configure(
        supervisor_exec.plugin, tmp_path, _config("      - {phase: pre_stop, name: drain, command: sleep 30}\n"), "exec"
    )
    ctx = make_context("exec", settings, config)
    with LogRecords.capture("exec") as logs:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(supervisor_exec.run_phase, ctx, "pre_stop", Deadline(30))
            with trio.fail_after(30):
                await logs.wait_for("drain: started (pid")
            ctx.main_exited.set()
            nursery.cancel_scope.cancel()
    pid = int(re.search(r"pid (\d+)", logs.messages[0]).group(1))  # type: ignore[union-attr]
    leftovers.append(pid)
    assert "drain: cancelled by the main process's exit; stopping it" in logs.at(logging.WARNING)
    assert not pid_alive(pid)
