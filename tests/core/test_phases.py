"""``PhasePlugin`` covers every phase of ``PHASES`` through the same hooks a
third party implements, and ``read_phase`` accepts exactly those phases.
The phases are one enum, ``Phase``, whose members are their plain names."""

from __future__ import annotations

import json
from typing import Any

import pytest
import trio
import trio.testing

from supervisor import PHASES, PROCESS_PHASES, Config, Deadline, Phase, PhasePlugin, Settings, Timeline, hookspec
from supervisor._plan import ShutdownPlan
from tests.helpers import empty_host


def test_every_phase_is_a_hook_of_the_specification() -> None:
    specified = {name for name in dir(hookspec) if name.startswith("supervisor_")}
    assert {phase.hook for phase in PHASES} <= specified
    assert set(PHASES) >= PROCESS_PHASES
    # The process's stop itself is the plan's own step: no hook.
    assert Phase.STOP not in PHASES and "supervisor_stop" not in specified
    with pytest.raises(ValueError, match="no hook is called in the stop phase"):
        Phase.STOP.hook  # noqa: B018


def test_the_phases_are_their_plain_names_for_plugins() -> None:
    # What plugins and YAML files have always used, in the same order.
    assert PHASES == (
        "startup",
        "shutdown_started",
        "pre_stop",
        "wind_down",
        "before_process_stop",
        "after_process_stop",
        "post_stop",
    )
    assert {"before_process_stop", "after_process_stop"} == PROCESS_PHASES
    assert all(isinstance(phase, Phase) for phase in PHASES)
    assert f"{Phase.PRE_STOP} hooks" == "pre_stop hooks"
    assert json.dumps({"phase": Phase.WIND_DOWN}) == '{"phase": "wind_down"}'
    assert {"pre_stop": 1}[Phase.PRE_STOP] == 1


async def test_the_plan_calls_each_phase_and_records_it_by_the_enum(autojump_clock: trio.testing.MockClock) -> None:
    calls: list[str] = []

    async def run(ctx: object, phase: str, deadline: object, process: object, status: object) -> list[str]:
        calls.append(phase)
        return [phase]

    host = empty_host()
    host.add("acts", PhasePlugin(configure=lambda settings, config: None, run=run))
    host.enable(Config(plugins={"acts": Settings.from_mapping({}, path="plugins.acts")}))
    timeline = Timeline()
    host.bind(Config(), {}, timeline, trio.Event())
    await ShutdownPlan(host, [], timeline, trio.Event()).run(Deadline(30), "received SIGTERM")
    # No process: no per-process phase; wind_down runs beside pre_stop.
    assert sorted(calls) == sorted(["shutdown_started", "pre_stop", "wind_down", "post_stop"])
    steps = {step.phase for step in timeline.steps}
    assert steps == {Phase.SHUTDOWN_STARTED, Phase.PRE_STOP, Phase.WIND_DOWN, Phase.POST_STOP}
    assert all(type(step.phase) is Phase for step in timeline.steps)


async def test_phase_plugin_runs_its_entries_in_every_phase(autojump_clock: trio.testing.MockClock) -> None:
    calls: list[tuple[str, str | None]] = []

    async def run(ctx: object, phase: str, deadline: object, process: object, status: object) -> list[str]:
        calls.append((phase, getattr(process, "name", None)))
        return [] if phase == "post_stop" else [phase]

    host = empty_host()
    host.add("acts", PhasePlugin(configure=lambda settings, config: None, run=run))
    host.enable(Config(plugins={"acts": Settings.from_mapping({}, path="plugins.acts")}))
    timeline = Timeline()
    host.bind(Config(), {}, timeline, trio.Event())
    deadline = Deadline(30)

    class Web:
        name = "web"

    for phase in PHASES:
        extra: dict[str, Any] = {"process": Web()} if phase in PROCESS_PHASES else {}
        if phase == "after_process_stop":
            extra["status"] = object()
        await host.call(f"supervisor_{phase}", deadline=None if phase == "startup" else deadline, phase=phase, **extra)
    assert calls == [(p, "web" if p in PROCESS_PHASES else None) for p in PHASES]
    # post_stop had nothing to do: SKIP, no step.
    assert [s.phase for s in timeline.steps] == [p for p in PHASES if p != "post_stop"]


def test_read_phase_takes_wind_down_without_a_process() -> None:
    from supervisor import read_phase

    entry = Settings.from_mapping({"phase": "wind_down"}, path="plugins.acts.entries[0]")
    assert read_phase(entry, Config()) == ("wind_down", None)
    assert entry.problems == []
    entry = Settings.from_mapping({"phase": "wind_down", "process": "web"}, path="plugins.acts.entries[0]")
    assert read_phase(entry, Config()) == ("wind_down", None)
    assert [p.message for p in entry.problems] == [
        "plugins.acts.entries[0].process: only before_process_stop and after_process_stop entries belong to a "
        "process, not wind_down"
    ]


async def test_run_each_runs_concurrently_keeps_order_and_drops_what_the_deadline_cut(
    autojump_clock: trio.testing.MockClock,
) -> None:
    from dataclasses import dataclass

    from supervisor import entries_for, run_each

    @dataclass(frozen=True)
    class Entry:
        phase: str
        seconds: float
        process: str | None = None

    entries = [Entry("pre_stop", 3.0), Entry("post_stop", 1.0), Entry("pre_stop", 60.0), Entry("pre_stop", 1.0)]
    chosen = entries_for(entries, "pre_stop")
    assert [entry.seconds for entry in chosen] == [3.0, 60.0, 1.0]

    async def run(entry: Entry, nursery: trio.Nursery) -> float:
        await trio.sleep(entry.seconds)
        return entry.seconds

    started = trio.current_time()
    deadline = Deadline(10.0)  # hooks end at 9 s: the 60 s entry is cut there
    outcomes = await run_each(chosen, run, deadline)
    assert outcomes == [3.0, 1.0]  # the entries' order, not the order they ended in
    assert trio.current_time() - started == 9.0  # concurrently: the cut, not 3 + 9 + 1
