"""The plugin host in-process, on trio's MockClock: what each call of a hook
ends as (its timeline step and its log line), when it is cut off, and in
which order implementations run.  Exact times, no real waiting."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
import trio
import trio.testing

from supervisor import SKIP, Config, ConfigError, Deadline, HookFailed, Settings, Timeline, hookimpl
from supervisor._pluginhost import PluginHost
from tests.helpers import empty_host


class Sleeper:
    """pre_stop sleeps ``seconds``; every call is noted with its times."""

    def __init__(self, name: str, seconds: float, notes: list[tuple[str, float, float]]) -> None:
        self.name, self.seconds, self.notes = name, seconds, notes

    @hookimpl
    async def supervisor_pre_stop(self) -> None:
        started = trio.current_time()
        try:
            await trio.sleep(self.seconds)
        finally:
            self.notes.append((self.name, started, trio.current_time()))


class First(Sleeper):
    @hookimpl(tryfirst=True)
    async def supervisor_pre_stop(self) -> None:
        await super().supervisor_pre_stop()


class Last(Sleeper):
    @hookimpl(trylast=True)
    async def supervisor_pre_stop(self) -> None:
        await super().supervisor_pre_stop()


class Outcomes:
    """One implementation of each way a hook call can end."""

    @hookimpl
    async def supervisor_post_stop(self) -> object:
        return SKIP

    @hookimpl
    async def supervisor_pre_stop(self) -> None:
        raise RuntimeError("boom")

    @hookimpl
    async def supervisor_wind_down(self) -> None:
        await trio.sleep_forever()

    @hookimpl
    async def supervisor_shutdown_started(self) -> None:
        raise HookFailed("2 guest(s) still running")


class Events:
    """A process event hook that never returns."""

    def __init__(self) -> None:
        self.cancelled_at: float | None = None

    @hookimpl
    async def supervisor_process_started(self, process: object) -> None:
        try:
            await trio.sleep_forever()
        finally:
            self.cancelled_at = trio.current_time()


class FirstBackground:
    @hookimpl(tryfirst=True)
    async def supervisor_background(self) -> None:
        await trio.sleep_forever()


class AsyncConfigure:
    @hookimpl
    async def supervisor_configure(self, settings: Settings) -> None:
        pass


class Wrapper:
    @hookimpl(wrapper=True)
    def supervisor_pre_stop(self) -> Iterator[None]:
        return (yield)


def _host(plugins: Mapping[str, object], sections: Mapping[str, Mapping[str, Any]] | None = None) -> PluginHost:
    sections = sections or {}
    config = Config(
        plugins={name: Settings.from_mapping(sections.get(name, {}), path=f"plugins.{name}") for name in plugins}
    )
    host = empty_host()
    for name, plugin in plugins.items():
        host.add(name, plugin)
    host.enable(config)
    return host


def _bind(host: PluginHost) -> Timeline:
    timeline = Timeline()
    host.bind(Config(), {}, timeline, trio.Event())
    return timeline


def _steps(timeline: Timeline) -> list[tuple[str, str | None, str, float, float]]:
    return [(s.phase, s.plugin, s.outcome, s.start, s.duration) for s in timeline.steps]


async def test_implementations_of_one_hook_run_side_by_side(autojump_clock: trio.testing.MockClock) -> None:
    notes: list[tuple[str, float, float]] = []
    host = _host({f"s{i}": Sleeper(f"s{i}", 1.0, notes) for i in range(3)})
    timeline = _bind(host)
    await host.call("supervisor_pre_stop", deadline=Deadline(30), phase="pre_stop")
    assert sorted((name, start, end) for name, start, end in notes) == [("s0", 0, 1), ("s1", 0, 1), ("s2", 0, 1)]
    assert sorted(_steps(timeline)) == [("pre_stop", f"s{i}", "ok", 0, 1) for i in range(3)]


async def test_tryfirst_and_trylast_run_in_waves(autojump_clock: trio.testing.MockClock) -> None:
    notes: list[tuple[str, float, float]] = []
    # Registered last-first, so registration order alone would get it wrong.
    host = _host(
        {
            "last": Last("last", 1.0, notes),
            "plain": Sleeper("plain", 2.0, notes),
            "plain2": Sleeper("plain2", 1.0, notes),
            "first": First("first", 1.0, notes),
        }
    )
    _bind(host)
    await host.call("supervisor_pre_stop", deadline=Deadline(30), phase="pre_stop")
    # The plain wave starts when the tryfirst one is over, and the trylast
    # one when the slower of the plain ones is.
    assert sorted(notes, key=lambda n: (n[1], n[0])) == [
        ("first", 0, 1),
        ("plain", 1, 3),
        ("plain2", 1, 2),
        ("last", 3, 4),
    ]


async def test_waves_share_one_deadline(autojump_clock: trio.testing.MockClock) -> None:
    notes: list[tuple[str, float, float]] = []
    host = _host({"first": First("first", 60.0, notes), "plain": Sleeper("plain", 60.0, notes)})
    timeline = _bind(host)
    await host.call("supervisor_pre_stop", deadline=Deadline(10), phase="pre_stop")
    # 10 s less the 1 s reserve: the first wave takes it all; the plain one
    # starts with nothing left and is cut at once, never past the reserve.
    assert sorted(_steps(timeline)) == [("pre_stop", "first", "timeout", 0, 9), ("pre_stop", "plain", "timeout", 9, 0)]


async def test_each_outcome_is_a_step_and_a_log_line(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    host = _host({"outcomes": Outcomes()}, {"outcomes": {"hook_timeout": "2s"}})
    timeline = _bind(host)
    deadline = Deadline(10)
    with caplog.at_level(logging.INFO, logger="supervisor.plugin.outcomes"):
        await host.call("supervisor_shutdown_started", deadline=deadline, phase="shutdown_started", reason="test")
        await host.call("supervisor_pre_stop", deadline=deadline, phase="pre_stop")
        await host.call("supervisor_wind_down", deadline=deadline, phase="wind_down")
        await host.call("supervisor_post_stop", deadline=deadline, phase="post_stop")
    # SKIP leaves no step; the exception's text is the step's detail.  A
    # HookFailed is a failure the plugin knows: "failed", no traceback.
    assert [(s.phase, s.outcome, s.detail, s.duration) for s in timeline.steps] == [
        ("shutdown_started", "failed", "2 guest(s) still running", 0),
        ("pre_stop", "error", "RuntimeError: boom", 0),
        ("wind_down", "timeout", "", 2),
    ]
    assert [r.getMessage() for r in caplog.records] == [
        "supervisor_shutdown_started failed: 2 guest(s) still running",
        "supervisor_pre_stop failed: RuntimeError: boom",
        "supervisor_wind_down timed out",
    ]
    assert [r.exc_info is None for r in caplog.records] == [True, False, True]


async def test_a_hook_cut_by_the_deadline_says_so(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    host = _host({"outcomes": Outcomes()})
    timeline = _bind(host)
    with caplog.at_level(logging.WARNING, logger="supervisor.plugin.outcomes"):
        await host.call("supervisor_wind_down", deadline=Deadline(2), phase="wind_down")
        second = Deadline(2)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(lambda: host.call("supervisor_wind_down", deadline=second, phase="wind_down"))
            await trio.sleep(0.5)
            second.expire("second SIGTERM")
    # Cut 0.2 s (the reserve) before the escalation moment; then, with a
    # second SIGTERM, at once.
    assert [s.outcome for s in timeline.steps] == ["timeout", "cancelled"]
    assert [s.duration for s in timeline.steps] == pytest.approx([1.8, 0.5])
    assert [r.getMessage() for r in caplog.records] == [
        "supervisor_wind_down cut short to keep 0.200s in reserve for stopping processes",
        "supervisor_wind_down cut short: the shutdown deadline leaves no more time",
    ]


async def test_a_process_event_is_not_waited_for_and_is_bounded(autojump_clock: trio.testing.MockClock) -> None:
    plugin = Events()
    host = _host({"events": plugin})
    _bind(host)
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            host.start_soon(nursery, "supervisor_process_started", process=object())
            assert plugin.cancelled_at is None  # start_soon returned at once
    # Outside the shutdown, without a hook_timeout of its own: 30 s.
    assert plugin.cancelled_at == 30


async def test_plugins_not_enabled_are_not_called(autojump_clock: trio.testing.MockClock) -> None:
    notes: list[tuple[str, float, float]] = []
    host = empty_host()
    host.add("idle", Sleeper("idle", 1.0, notes))
    host.describe()  # registers every installed plugin with pluggy
    _bind(host)
    assert host.implementations("supervisor_pre_stop") == []
    await host.call("supervisor_pre_stop", deadline=Deadline(30), phase="pre_stop")
    assert notes == []


@pytest.mark.parametrize(
    ("plugin", "message"),
    [
        (
            FirstBackground(),
            "plugin 'p' is invalid: supervisor_background: tryfirst cannot apply: "
            "background tasks all run side by side until the shutdown begins",
        ),
        (AsyncConfigure(), "plugin 'p' is invalid: supervisor_configure: must be a plain function, not async"),
        (
            Wrapper(),
            "plugin 'p' is invalid: supervisor_pre_stop: hook wrappers are not supported (hooks may be async)",
        ),
    ],
    ids=["tryfirst-background", "async-configure", "wrapper"],
)
def test_what_the_host_cannot_honour_is_refused_at_enable(plugin: object, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        _host({"p": plugin})
    # One line at the plugin's section, as for any other configuration error.
    assert str(caught.value) == f"<memory>:1:1: {message}"


async def test_a_hook_cut_to_keep_time_for_later_says_so(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """A pre_stop hook cut where the time kept for the steps after the stops
    begins says what it was cut for, not that it timed out."""
    host = _host({"outcomes": Outcomes()})
    timeline = _bind(host)
    deadline = Deadline(10)
    deadline.keep_for_later(1.5)
    with caplog.at_level(logging.WARNING, logger="supervisor.plugin.outcomes"):
        await host.call("supervisor_wind_down", deadline=deadline, phase="wind_down")
    assert [s.duration for s in timeline.steps] == pytest.approx([10 - 1.0 - 1.5])
    assert [r.getMessage() for r in caplog.records] == [
        "supervisor_wind_down cut short to keep 1.000s in reserve for stopping processes "
        "and 1.500s for the steps after them",
    ]
