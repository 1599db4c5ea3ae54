"""``supervisor replan`` through the real CLI, against the supervisor as PID 1
of a PID namespace: a file changed under a running pod is applied without a
restart, and a broken one changes nothing."""

from __future__ import annotations

import signal
import textwrap
from pathlib import Path

from tests.control._ctl import ctl, row, status, wait_status, write_config
from tests.pid1 import Supervisor

BEFORE = """
grace_period: 10s
processes:
  - {name: db, command: [sleep, "300"]}
  - {name: keeper, command: [sleep, "300"], depends_on: [db]}
  - {name: old, command: [sleep, "300"], depends_on: [db]}
  - {name: legacy, command: [sleep, "300"], depends_on: [old]}
  - {name: changer, command: [sleep, "300"], env: {MODE: one}}
  - {name: app, main: true, command: [sleep, "300"]}
"""

AFTER = """
grace_period: 20s
processes:
  - {name: db, command: [sleep, "300"]}
  # a comment and a moved line change nothing for keeper
  - name: keeper
    command: [sleep, "300"]
    depends_on: [db]
  - {name: changer, command: [sleep, "300"], env: {MODE: two}}
  - {name: fresh, command: [sleep, "300"], depends_on: [changer], ready: {after: 100ms}}
  - {name: app, main: true, command: [sleep, "300"]}
"""


def _running(answer: dict[str, object], *names: str) -> bool:
    return all(row(answer, name)["state"] == "running" for name in names)  # type: ignore[arg-type]


def test_replan_adds_removes_and_changes_while_the_rest_runs_on(tmp_path: Path) -> None:
    path = Path(write_config(tmp_path, BEFORE))
    with Supervisor(["-c", str(path)]) as sup:
        before = wait_status(sup, lambda a: _running(a, "db", "keeper", "old", "legacy", "changer", "app"))
        untouched = {name: row(before, name)["pid"] for name in ("db", "keeper", "app")}
        changer = row(before, "changer")["pid"]

        path.write_text(textwrap.dedent(AFTER))
        dry = ctl(sup, "replan", "--dry-run")
        assert dry.returncode == 0, dry.stderr
        assert dry.stdout.splitlines() == [
            "+ fresh: new, will be started",
            "- old: removed, will be stopped",
            "- legacy: removed, will be stopped",
            "~ changer: changed (env), will be restarted",
            "= db: unchanged, left alone",
            "= keeper: unchanged, left alone",
            "~ grace_period: 10s → 20s",
            "(dry run: nothing was changed)",
        ]
        # The dry run changed nothing.
        assert [(p["name"], p["pid"]) for p in status(sup)["processes"]] == [
            (p["name"], p["pid"]) for p in before["processes"]
        ]

        result = ctl(sup, "replan")
        assert result.returncode == 0, result.stderr
        lines = result.stdout.splitlines()
        # Dependents stop before what they depend on; then the new and the
        # changed start in dependency order.
        assert lines.index("legacy stopped (killed by SIGTERM (exit code 143))") < lines.index(
            "old stopped (killed by SIGTERM (exit code 143))"
        ), lines
        assert lines.index("changer stopped (killed by SIGTERM (exit code 143))") < next(
            i for i, line in enumerate(lines) if line.startswith("changer started (pid")
        )
        assert next(i for i, line in enumerate(lines) if line.startswith("changer started")) < next(
            i for i, line in enumerate(lines) if line.startswith("fresh started")
        ), lines

        after = status(sup)
        assert [p["name"] for p in after["processes"]] == ["db", "keeper", "changer", "fresh", "app"]
        assert _running(after, "db", "keeper", "changer", "fresh", "app")
        # The rest kept running undisturbed: same PIDs, never restarted.
        assert {name: row(after, name)["pid"] for name in untouched} == untouched
        assert all(row(after, name)["restarts"] == 0 for name in untouched)
        assert row(after, "changer")["pid"] != changer
        sup.wait_for(r"replan: \+ fresh: new, will be started")

        # A second replan of the same file has nothing to do.
        again = ctl(sup, "replan")
        assert again.returncode == 0 and "nothing to change" in again.stdout, again

        # The new grace period is the one the shutdown uses.
        sup.signal(signal.SIGTERM)
        assert sup.wait() == 143, sup.output
    assert "(grace period 20s)" in sup.output


def test_replan_of_a_broken_file_changes_nothing(tmp_path: Path) -> None:
    path = Path(write_config(tmp_path, BEFORE))
    with Supervisor(["-c", str(path)]) as sup:
        before = wait_status(sup, lambda a: _running(a, "db", "keeper", "old", "legacy", "changer", "app"))
        path.write_text(
            textwrap.dedent(
                """
                grace_period: 10s
                processes:
                  - {name: db, command: [sleep, "300"], stop_signal: SIGFOO}
                  - {name: keeper, command: [sleep, "300"], depends_on: [nowhere]}
                  - {name: app, main: true, command: [sleep, "300"]}
                """
            )
        )
        result = ctl(sup, "replan")
        assert result.returncode == 2, result
        errors = result.stderr.splitlines()
        assert errors[0].startswith(f"{path}:4:") and "SIGFOO" in errors[0], errors
        assert errors[1].startswith(f"{path}:5:") and "unknown process 'nowhere'" in errors[1], errors
        assert errors[2] == "supervisor replan: the configuration has 2 problem(s); nothing was changed"
        assert result.stdout == ""
        after = status(sup)
        assert [(p["name"], p["pid"], p["state"]) for p in after["processes"]] == [
            (p["name"], p["pid"], p["state"]) for p in before["processes"]
        ]
        assert "replan:" not in sup.output


def test_replan_says_what_needs_a_restart(tmp_path: Path) -> None:
    path = Path(
        write_config(
            tmp_path,
            "plugins: {sleep: {seconds: 1s}}\nprocesses:\n  - {name: app, main: true, command: [sleep, '300']}\n",
        )
    )
    with Supervisor(["-c", str(path)]) as sup:
        app = row(wait_status(sup, lambda a: _running(a, "app")), "app")["pid"]
        path.write_text(
            "plugins: {sleep: {seconds: 2s}}\nlog: {level: debug}\n"
            "processes:\n  - {name: app, main: true, command: [sleep, '301']}\n"
        )
        result = ctl(sup, "replan")
        assert result.returncode == 0, result.stderr
        assert result.stdout.splitlines() == [
            "! main process app (command): needs a restart of the container, not applied",
            "! plugin sleep's settings: needs a restart of the container, not applied",
            "! log: needs a restart of the container, not applied",
        ]
        assert row(status(sup), "app")["pid"] == app


def test_replan_without_a_file_is_refused() -> None:
    with Supervisor(["--control", "--", "sh", "-c", "echo up; exec sleep 60"]) as sup:
        sup.wait_for("^up$", stream="stdout")
        wait_status(sup, lambda a: True)
        result = ctl(sup, "replan")
        assert result.returncode == 1
        assert result.stderr.strip() == (
            "supervisor replan: nothing to replan: the supervisor was started without a configuration file (-c)"
        )
