"""``supervisor -- COMMAND`` without a configuration: PID 1 runs the command
itself (no orchestrator, no trio), quiet unless something goes wrong; with a
plan, PID 1 still forwards the main process's signals itself."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

from tests.core.children import SIGNAL_REPORTER
from tests.pid1 import Supervisor, run, wait_until

PY = sys.executable


def _children(pid: int) -> list[int]:
    return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def test_pid1_runs_the_command_itself_and_imports_nothing_heavy() -> None:
    with Supervisor(["--", PY, "-c", SIGNAL_REPORTER]) as sup:
        sup.wait_for("^ready$", stream="stdout")
        children = _children(sup.pid)
        # The command is PID 1's only child: no orchestrator in between.
        assert len(children) == 1
        assert Path(f"/proc/{children[0]}/cmdline").read_bytes().split(b"\0")[:2] == [PY.encode(), b"-c"]
        maps = Path(f"/proc/{sup.pid}/maps").read_text()
        assert "/trio/" not in maps and "_yaml" not in maps and "pluggy" not in maps
        sup.signal(signal.SIGTERM)
        assert sup.wait() == 0


def test_nothing_is_printed_unless_something_goes_wrong() -> None:
    with Supervisor(["--", PY, "-c", SIGNAL_REPORTER]) as sup:
        sup.wait_for("^ready$", stream="stdout")
        sup.signal(signal.SIGUSR1)
        sup.wait_for(f"^got {int(signal.SIGUSR1)}$", stream="stdout")
        sup.signal(signal.SIGTERM)
        assert sup.wait() == 0
    assert sup.stderr_lines == []
    status, sup = run(["--", "sh", "-c", "exit 3"])
    assert status == 3 and sup.stderr_lines == []
    status, sup = run(["--", "/no/such/program"])
    assert status == 127
    assert len(sup.stderr_lines) == 1 and "command not found" in sup.stderr_lines[0]


def test_expected_exit_codes_and_group_forwarding() -> None:
    # -g: the whole group gets the signal: the main process (on stdout) and
    # its child (on stderr) report it.
    script = f"{PY} -c '{SIGNAL_REPORTER}' >&2 & exec {PY} -c '{SIGNAL_REPORTER}'"
    with Supervisor(["-g", "-e", "143", "--", "sh", "-c", script]) as sup:
        for stream in ("stdout", "stderr"):
            sup.wait_for("^ready$", stream=stream)
        sup.signal(signal.SIGUSR2)
        for stream in ("stdout", "stderr"):
            sup.wait_for(f"^got {int(signal.SIGUSR2)}$", stream=stream)
        sup.signal(signal.SIGTERM)
        assert sup.wait() == 0


def test_killed_by_its_stop_signal_exits_143_or_0_with_e() -> None:
    status, _ = run(["-e", "143", "--", "sh", "-c", "kill -TERM $$"])
    assert status == 0
    status, _ = run(["--", "sh", "-c", "kill -TERM $$"])
    assert status == 143


def test_with_a_plan_pid1_forwards_the_main_process_signals_itself(tmp_path: Path) -> None:
    program = tmp_path / "main.py"
    program.write_text(SIGNAL_REPORTER)
    config = tmp_path / "deploy.yaml"
    config.write_text(f'processes: [{{name: app, main: true, command: ["{PY}", "{program}"]}}]\n')
    with Supervisor(["-v", "-c", str(config)]) as sup:
        sup.wait_for("^ready$", stream="stdout")
        # Once the orchestrator has told PID 1 the main process's PID...
        wait_until(lambda: len(_children(sup.pid)) == 1 and len(_children(_children(sup.pid)[0])) == 1)
        for _ in range(50):
            sup.signal(signal.SIGUSR1)
            sup.wait_for(f"^got {int(signal.SIGUSR1)}$", stream="stdout", count=_ + 1)
            if "[init] forwarded SIGUSR1 to the main process" in sup.output:
                break
        # ...PID 1 delivers them, not the orchestrator.
        sup.wait_for(r"\[init\] forwarded SIGUSR1 to the main process \(pid \d+\)")
        sup.signal(signal.SIGTERM)
        assert sup.wait() == 0
