"""The plugin host and the shutdown plan, through the real CLI as PID 1.

Test plugins are real installed distributions: each test writes modules and a
``*.dist-info`` with ``entry_points.txt`` into a directory on PYTHONPATH, which
is exactly how ``importlib.metadata`` finds a pip-installed plugin (with
``SUPERVISOR_ALLOW_PYTHONPATH=1``: the supervisor ignores PYTHONPATH otherwise).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from supervisor.pid1.state import wall_margin
from tests.pid1 import Supervisor, run, wait_until

# Where a hook of a 10 s shutdown is cut: the orchestrator's escalation
# (the grace period less its margin before the wall) less the 1 s reserve.
HOOKS_END_OF_10S = 10.0 - wall_margin(10.0) - 1.0

PLUGINS = {
    "recorder": """
        import os
        from supervisor import hookimpl

        LOG = os.environ["RECORD_FILE"]

        def note(text):
            with open(LOG, "a") as f:
                f.write(text + "\\n")

        @hookimpl
        def supervisor_configure(settings, config):
            settings.check_keys(["label"])
            return settings.string("label", default="rec")

        @hookimpl
        async def supervisor_startup(ctx):
            note(f"{ctx.settings} startup")

        @hookimpl
        def supervisor_process_started(ctx, process):
            note(f"{ctx.settings} started {process.name}")

        @hookimpl
        async def supervisor_shutdown_started(ctx, deadline, reason):
            note(f"{ctx.settings} shutdown_started {reason}")

        @hookimpl
        async def supervisor_pre_stop(ctx, deadline):
            note(f"{ctx.settings} pre_stop")

        @hookimpl
        async def supervisor_before_process_stop(ctx, deadline, process):
            note(f"{ctx.settings} before_process_stop {process.name} running={process.running}")

        @hookimpl
        async def supervisor_after_process_stop(ctx, deadline, process, status):
            note(f"{ctx.settings} after_process_stop {process.name} {status.exit_code} running={process.running}")

        @hookimpl
        async def supervisor_post_stop(ctx, deadline):
            note(f"{ctx.settings} post_stop")
    """,
    "slow": """
        import trio
        from supervisor import hookimpl

        @hookimpl
        def supervisor_configure(settings, config):
            return settings.duration("seconds", default=1.0)

        @hookimpl
        async def supervisor_pre_stop(ctx, deadline):
            await trio.sleep(ctx.settings)
    """,
    "raises": """
        from supervisor import hookimpl

        @hookimpl
        async def supervisor_pre_stop(ctx, deadline):
            raise RuntimeError("async boom")
    """,
    "sync_raises": """
        from supervisor import hookimpl

        @hookimpl
        def supervisor_pre_stop(ctx, deadline):
            raise RuntimeError("sync boom")
    """,
    "hangs": """
        import trio
        from supervisor import hookimpl

        @hookimpl
        async def supervisor_pre_stop(ctx, deadline):
            await trio.sleep_forever()
    """,
    "quiet": """
        from supervisor import SKIP, hookimpl

        @hookimpl
        async def supervisor_pre_stop(ctx, deadline):
            return SKIP
    """,
    "broken": """
        raise ImportError("this plugin is broken on purpose")
    """,
    "watcher": """
        import trio
        from supervisor import hookimpl

        @hookimpl
        async def supervisor_background(ctx):
            await trio.sleep(2.5)
            ctx.log.info("still watching after 2.5s")
            await trio.sleep_forever()
    """,
}


@pytest.fixture
def plugin_path(tmp_path: Path) -> Path:
    """A site directory holding the test plugins as installed distributions."""
    site = tmp_path / "site"
    site.mkdir()
    entry_points = ["[supervisor.plugins]"]
    # Two more copies of `slow`, as separate plugins, for the concurrency test,
    # and one that sleeps in wind_down instead.
    winds_down = PLUGINS["slow"].replace("supervisor_pre_stop", "supervisor_wind_down")
    sources = {**PLUGINS, "slow2": PLUGINS["slow"], "slow3": PLUGINS["slow"], "winds_down": winds_down}
    for name, source in sources.items():
        module = f"testplugin_{name}"
        (site / f"{module}.py").write_text(textwrap.dedent(source))
        entry_points.append(f"{name} = {module}")
    dist = site / "supervisor_testplugins-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: supervisor-testplugins\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("\n".join(entry_points) + "\n")
    return site


def _env(plugin_path: Path, tmp_path: Path) -> dict[str, str]:
    return {
        "PYTHONPATH": str(plugin_path),
        "SUPERVISOR_ALLOW_PYTHONPATH": "1",
        "RECORD_FILE": str(tmp_path / "record.txt"),
    }


def _config(tmp_path: Path, plugins: str, *, grace: str = "10s", extra: str = "") -> str:
    path = tmp_path / "deploy.yaml"
    path.write_text(f"grace_period: {grace}\nlog: {{format: json}}\n{extra}plugins:\n{textwrap.indent(plugins, '  ')}")
    return str(path)


def _starts(steps: list[dict[str, object]]) -> list[float]:
    return [float(s["start"]) for s in steps]  # type: ignore[arg-type]


def _ends(steps: list[dict[str, object]]) -> list[float]:
    return [float(s["start"]) + float(s["duration"]) for s in steps]  # type: ignore[arg-type]


def _terminated(config: str, plugin_path: Path, tmp_path: Path) -> Supervisor:
    """Run ``sleep 30`` under ``config`` as PID 1 and stop it with SIGTERM,
    once the supervisor has logged that it started and a recorder (if any)
    has noted it: ``process_started`` is not awaited by the supervisor, so
    on a busy machine its worker thread may run after the log line."""
    record = tmp_path / "record.txt"
    with Supervisor(["-c", config, "--", "sleep", "30"], env=_env(plugin_path, tmp_path)) as sup:
        sup.wait_for("started sleep")
        if "recorder" in Path(config).read_text():
            wait_until(lambda: record.exists() and " started sleep" in record.read_text(), timeout=30)
        sup.signal(signal.SIGTERM)
        assert sup.wait() == 143
    return sup


def _timeline(sup: Supervisor) -> list[dict[str, object]]:
    for record in sup.json_records():
        if "timeline" in record:
            return record["timeline"]  # type: ignore[return-value]
    raise AssertionError(f"no timeline in the output\n{sup.output}")


def test_phases_run_in_order_around_each_process(plugin_path: Path, tmp_path: Path) -> None:
    config = _config(tmp_path, "recorder: {label: r}\n")
    sup = _terminated(config, plugin_path, tmp_path)
    lines = (tmp_path / "record.txt").read_text().splitlines()
    assert lines == [
        "r startup",
        "r started sleep",
        "r shutdown_started received SIGTERM",
        "r pre_stop",
        "r before_process_stop sleep running=True",
        "r after_process_stop sleep 143 running=False",
        "r post_stop",
    ]
    phases = [(s["phase"], s["name"]) for s in _timeline(sup)]
    assert (
        phases.index(("pre_stop", "pre_stop"))
        < phases.index(("stop", "sleep"))
        < phases.index(("post_stop", "post_stop"))
    )


def test_pre_stop_hooks_run_concurrently(plugin_path: Path, tmp_path: Path) -> None:
    config = _config(tmp_path, "slow: {seconds: 1s}\nslow2: {seconds: 1s}\nslow3: {seconds: 1s}\n")
    sup = _terminated(config, plugin_path, tmp_path)
    steps = [s for s in _timeline(sup) if s["phase"] == "pre_stop"]
    assert sorted(str(s["plugin"]) for s in steps) == ["slow", "slow2", "slow3"]
    assert all(s["outcome"] == "ok" for s in steps)
    # Side by side, not in a row: each started before any had ended (one
    # after another, each would start at the previous one's end).  No
    # wall-clock bound, so a busy machine cannot fail it.
    starts, ends = _starts(steps), _ends(steps)
    assert max(starts) < min(ends), steps


def test_failing_and_hanging_hooks_do_not_block_the_others(plugin_path: Path, tmp_path: Path) -> None:
    plugins = "recorder: {}\nraises: {}\nsync_raises: {}\nhangs: {hook_timeout: 1s}\nquiet: {}\n"
    config = _config(tmp_path, plugins)
    sup = _terminated(config, plugin_path, tmp_path)
    outcomes = {s["plugin"]: s["outcome"] for s in _timeline(sup) if s["phase"] == "pre_stop"}
    assert outcomes == {"recorder": "ok", "raises": "error", "sync_raises": "error", "hangs": "timeout"}
    assert "async boom" in sup.output and "sync boom" in sup.output
    assert "rec post_stop" in (tmp_path / "record.txt").read_text()


def test_broken_plugin_is_skipped_unless_enabled(plugin_path: Path, tmp_path: Path) -> None:
    config = _config(tmp_path, "recorder: {}\n")
    status, sup = run(["-c", config, "--", "true"], env=_env(plugin_path, tmp_path))
    assert status == 0, sup.output
    config = _config(tmp_path, "recorder: {}\nbroken: {}\n")
    status, sup = run(["-c", config, "--", "true"], env=_env(plugin_path, tmp_path))
    assert status == 2
    assert f"{config}:5:11: plugin 'broken' failed to load: ImportError: this plugin is broken on purpose" in sup.output
    # Nothing ran the second time: the first run's startup is the only one.
    assert (tmp_path / "record.txt").read_text().count("startup") == 1


def test_unknown_plugin_and_bad_settings_are_configuration_errors(plugin_path: Path, tmp_path: Path) -> None:
    config = _config(tmp_path, "recorder: {lable: x}\nnope: {}\n")
    status, sup = run(["-c", config, "--", "true"], env=_env(plugin_path, tmp_path))
    assert status == 2
    errors = [line for line in sup.stderr_lines if line.startswith(config)]
    assert len(errors) == 2, sup.output
    assert "unknown key 'lable'" in errors[0] and "did you mean 'label'" in errors[0]
    assert errors[1].startswith(f"{config}:5:9:") and "plugin 'nope' is not installed" in errors[1]
    assert "Traceback" not in sup.output


def test_pre_stop_is_cancelled_when_the_main_process_exits_but_wind_down_runs_on(
    plugin_path: Path, tmp_path: Path
) -> None:
    # pre_stop is cancelled at the main process's exit (1.5 s after SIGTERM):
    # nothing left to drain; wind_down, beside it, runs its 3 s to the end
    # before anything stops.
    config = _config(tmp_path, "slow: {seconds: 60s}\nwinds_down: {seconds: 3s}\n", grace="60s")
    with Supervisor(
        ["-c", config, "--", "sh", "-c", "trap '' TERM; echo up; sleep 1.5; exit 4"], env=_env(plugin_path, tmp_path)
    ) as sup:
        sup.wait_for("^up$", stream="stdout")
        sup.signal(signal.SIGTERM)
        assert sup.wait(timeout=20) == 4
    timeline = _timeline(sup)
    pre_stop = next(s for s in timeline if s["phase"] == "pre_stop")
    wind_down = next(s for s in timeline if s["phase"] == "wind_down")
    stop = next(s for s in timeline if s["phase"] == "stop")
    (pre_start, wind_start), (pre_end, wind_end) = _starts([pre_stop, wind_down]), _ends([pre_stop, wind_down])
    # pre_stop was cut at the main process's exit, long before its 60 s...
    assert pre_stop["outcome"] == "cancelled"
    assert pre_end - pre_start < 30
    # ...wind_down ran its whole 3 s beside it...
    assert (wind_down["plugin"], wind_down["outcome"]) == ("winds_down", "ok")
    assert wind_end - wind_start >= 3.0 - 0.01
    assert pre_start < wind_end and wind_start < pre_end
    # ...and the stop came after both.
    assert float(stop["start"]) >= max(pre_end, wind_end)  # type: ignore[arg-type]


def test_wind_down_runs_when_the_main_process_has_already_exited(plugin_path: Path, tmp_path: Path) -> None:
    config = _config(tmp_path, "slow: {seconds: 60s}\nwinds_down: {seconds: 1s}\n", grace="60s")
    status, sup = run(["-c", config, "--", "true"], env=_env(plugin_path, tmp_path))
    assert status == 0, sup.output
    steps = {(s["phase"], s["outcome"]) for s in _timeline(sup)}
    assert ("pre_stop", "skipped") in steps
    assert ("wind_down", "ok") in steps


def test_wind_down_is_cut_by_the_deadline(plugin_path: Path, tmp_path: Path) -> None:
    # A 10 s grace period: hooks end 1 s (the reserve) before the escalation
    # moment, which leaves the rest of the shutdown a second before the wall
    # even on a busy machine; with 2 s it had 0.2 s, and a late orchestrator
    # met the wall before it could log its timeline.
    config = _config(tmp_path, "winds_down: {seconds: 60s}\n", grace="10s")
    status, sup = run(["-c", config, "--", "true"], env=_env(plugin_path, tmp_path))
    assert status == 0, sup.output
    step = next(s for s in _timeline(sup) if s["phase"] == "wind_down")
    assert step["outcome"] == "timeout"
    # Cut at the escalation moment (10 s less the margin) less the 1 s
    # reserve, and not before.  No upper bound on a wall clock: a busy
    # machine may resume the orchestrator late.  A hook that was not cut
    # would run into the wall, where PID 1 kills the orchestrator and no
    # timeline is logged; the exact moment is test_dispatch.py's, on a mock
    # clock.
    (end,) = _ends([step])
    assert end >= HOOKS_END_OF_10S - 0.01


def test_hook_timeout_does_not_cut_the_background_task(plugin_path: Path, tmp_path: Path) -> None:
    config = _config(tmp_path, "watcher: {hook_timeout: 1s}\n")
    with Supervisor(["-c", config, "--", "sleep", "30"], env=_env(plugin_path, tmp_path)) as sup:
        sup.wait_for("started sleep")
        # Past its 1 s hook_timeout, the background task still runs.
        sup.wait_for("still watching after 2.5s")
        sup.signal(signal.SIGTERM)
        assert sup.wait() == 143
    assert "supervisor_background timed out" not in sup.output


def test_hook_overrunning_the_budget_is_cut_so_escalation_still_happens(plugin_path: Path, tmp_path: Path) -> None:
    # A process that ignores SIGTERM, with a stop_timeout well inside what
    # the reserve leaves: the escalation must come from the orchestrator,
    # a second before the wall, so that a busy machine cannot turn it into
    # PID 1's kill at the wall.
    stubborn = "trap '' TERM; echo up; while :; do sleep 0.05; done"
    spec = f"{{name: stubborn, main: true, command: [sh, -c, {stubborn!r}], stop_timeout: 300ms}}"
    processes = f"processes:\n  - {spec}\n"
    config = _config(tmp_path, "hangs: {}\n", grace="10s", extra=processes)
    with Supervisor(["-c", config], env=_env(plugin_path, tmp_path)) as sup:
        sup.wait_for("^up$", stream="stdout")
        sup.signal(signal.SIGTERM)
        assert sup.wait(timeout=30) == 137
    timeline = _timeline(sup)
    hook = next(s for s in timeline if s["phase"] == "pre_stop")
    stop = next(s for s in timeline if s["phase"] == "stop")
    # The hook, which would hang for ever, gave way at the deadline less its
    # reserve (10 s less the margin less 1 s), not before; then the
    # stop ran, waited its stop_timeout and killed.  Without the cut the
    # stop would never have come before the wall, and PID 1 would have
    # killed the orchestrator, timeline unwritten.
    assert hook["outcome"] == "timeout"
    (hook_end,) = _ends([hook])
    assert HOOKS_END_OF_10S - 0.01 <= hook_end <= float(stop["start"])  # type: ignore[arg-type]
    assert (stop["name"], stop["outcome"]) == ("stubborn", "killed")
    assert float(stop["duration"]) >= 0.3 - 0.01  # type: ignore[arg-type]


def test_second_signal_during_pre_stop_escalates(plugin_path: Path, tmp_path: Path) -> None:
    config = _config(tmp_path, "hangs: {}\n", grace="60s")
    with Supervisor(
        ["-c", config, "--", "sh", "-c", "trap '' TERM; echo up; while :; do sleep 0.05; done"],
        env=_env(plugin_path, tmp_path),
    ) as sup:
        sup.wait_for("^up$", stream="stdout")
        sup.signal(signal.SIGTERM)
        sup.wait_for("shutting down")
        sup.signal(signal.SIGTERM)
        assert sup.wait(timeout=20) == 137
    hook = next(s for s in _timeline(sup) if s["phase"] == "pre_stop")
    assert hook["outcome"] == "cancelled"


def test_plugins_command_lists_installed_plugins(plugin_path: Path, tmp_path: Path) -> None:
    status, sup = run(["plugins"], env=_env(plugin_path, tmp_path), pid1=False)
    assert status == 0
    text = "\n".join(sup.stdout_lines)
    assert "recorder  (supervisor-testplugins 1.0)" in text
    assert "hooks: " in text and "pre_stop" in text
    assert "failed to load: ImportError" in text


def test_plugins_command_shows_the_same_docstrings_under_python_oo(plugin_path: Path, tmp_path: Path) -> None:
    """The image runs the supervisor with -OO, which drops every docstring
    from the compiled code; the listing reads them from the sources instead."""
    env = {**os.environ, **_env(plugin_path, tmp_path)}
    listings = [
        subprocess.run(
            [sys.executable, *flags, "-m", "supervisor", "plugins"],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        ).stdout
        for flags in ([], ["-OO"])
    ]
    assert "The ``exec`` plugin: run commands in any phase" in listings[0]  # a module's (a PhasePlugin)
    assert "recorder  (supervisor-testplugins 1.0)" in listings[0]
    assert listings[1] == listings[0]


def test_json_timeline_is_one_record_of_every_step(plugin_path: Path, tmp_path: Path) -> None:
    config = _config(tmp_path, "recorder: {}\nquiet: {}\n")
    sup = _terminated(config, plugin_path, tmp_path)
    # One line of the log holds the whole timeline, as a log shipper gets it.
    lines = [line for line in sup.stderr_lines if '"timeline"' in line]
    assert len(lines) == 1, sup.output
    steps = json.loads(lines[0])["timeline"]
    # Every step a user would look for, in order, with the plugin that ran
    # it; `quiet` returned SKIP from pre_stop and is left out.
    assert [(s["phase"], s.get("plugin"), s["name"], s["outcome"]) for s in steps] == [
        ("shutdown_started", "recorder", "shutdown_started", "ok"),
        ("pre_stop", "recorder", "pre_stop", "ok"),
        ("before_process_stop", "recorder", "sleep", "ok"),
        ("stop", None, "sleep", "ok"),
        ("after_process_stop", "recorder", "sleep", "ok"),
        ("post_stop", "recorder", "post_stop", "ok"),
    ]
    assert steps[3]["detail"] == "killed by SIGTERM (exit code 143)"
    assert all(s["duration"] >= 0 for s in steps)
    assert _starts(steps) == sorted(_starts(steps))
