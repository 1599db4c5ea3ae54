"""``PhasePlugin`` covers every phase of ``PHASES`` through the same hooks a
third party implements, and ``read_phase`` accepts exactly those phases."""

from __future__ import annotations

from typing import Any

import trio
import trio.testing

from supervisor import PHASES, PROCESS_PHASES, Config, Deadline, PhasePlugin, Settings, Timeline, hookspec
from supervisor._pluginhost import PluginHost


def test_every_phase_is_a_hook_of_the_specification() -> None:
    specified = {name.removeprefix("supervisor_") for name in dir(hookspec) if name.startswith("supervisor_")}
    assert set(PHASES) <= specified
    assert set(PHASES) >= PROCESS_PHASES


async def test_phase_plugin_runs_its_entries_in_every_phase(autojump_clock: trio.testing.MockClock) -> None:
    calls: list[tuple[str, str | None]] = []

    async def run(ctx: object, phase: str, deadline: object, process: object, status: object) -> list[str]:
        calls.append((phase, getattr(process, "name", None)))
        return [] if phase == "post_stop" else [phase]

    host = PluginHost.empty()
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
