"""The sleep plugin: a fixed pre_stop delay, cut by the main process's exit and
the deadline.  Timing runs on trio's MockClock (``autojump_clock``), so the
assertions are exact and the tests take no real time."""

from __future__ import annotations

import importlib.metadata
from collections.abc import Callable
from pathlib import Path

import pytest
import supervisor_sleep
import trio

from supervisor import Deadline
from tests.plugins._helpers import LogRecords, configure, configure_problems, make_context

CONFIG = """\
grace_period: 30s
plugins:
  sleep:
    seconds: {seconds}
"""


async def _sleep_hook(tmp_path: Path, seconds: str, deadline: Deadline) -> tuple[float, list[str]]:
    """Run pre_stop to its end; return how long it took and what it logged."""
    settings, config = configure(supervisor_sleep, tmp_path, CONFIG.format(seconds=seconds), "sleep")
    ctx = make_context("sleep", settings, config)
    start = trio.current_time()
    with LogRecords.capture("sleep") as logs:
        await supervisor_sleep.supervisor_pre_stop(ctx=ctx, deadline=deadline)
    return trio.current_time() - start, logs.messages


async def test_sleeps_the_configured_time(tmp_path: Path, autojump_clock: trio.testing.MockClock) -> None:
    elapsed, messages = await _sleep_hook(tmp_path, "15s", Deadline(30))
    assert elapsed == pytest.approx(15)
    assert messages == ["sleeping 15s before stopping processes"]


async def test_accepts_every_duration_form(tmp_path: Path, autojump_clock: trio.testing.MockClock) -> None:
    for written, seconds in [("2", 2.0), ("500ms", 0.5), ("1.5s", 1.5), ("1m", 60.0)]:
        elapsed, _ = await _sleep_hook(tmp_path, written, Deadline(300))
        assert elapsed == pytest.approx(seconds), written


async def test_zero_is_a_no_op(tmp_path: Path, autojump_clock: trio.testing.MockClock) -> None:
    elapsed, messages = await _sleep_hook(tmp_path, "0s", Deadline(30))
    assert elapsed == 0
    assert messages == []


async def test_capped_by_the_deadline_and_says_so(tmp_path: Path, autojump_clock: trio.testing.MockClock) -> None:
    # A 10 s budget keeps 1 s in reserve for stopping processes: hooks get 9 s.
    elapsed, messages = await _sleep_hook(tmp_path, "15s", Deadline(10))
    assert elapsed == pytest.approx(9)
    assert "sleeping 9s instead of 15s" in messages[0]


async def test_cut_short_when_the_main_process_exits(tmp_path: Path, autojump_clock: trio.testing.MockClock) -> None:
    settings, config = configure(supervisor_sleep, tmp_path, CONFIG.format(seconds="15s"), "sleep")
    ctx = make_context("sleep", settings, config)
    start = trio.current_time()
    with LogRecords.capture("sleep") as logs:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(supervisor_sleep.supervisor_pre_stop, ctx, Deadline(30))
            await trio.sleep(2)
            ctx.main_exited.set()
    assert trio.current_time() - start == pytest.approx(2)
    assert "sleep cut short after 2s: the main process exited" in logs.messages


async def test_no_sleep_once_the_main_process_has_exited(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    settings, config = configure(supervisor_sleep, tmp_path, CONFIG.format(seconds="15s"), "sleep")
    ctx = make_context("sleep", settings, config)
    ctx.main_exited.set()
    start = trio.current_time()
    await supervisor_sleep.supervisor_pre_stop(ctx=ctx, deadline=Deadline(30))
    assert trio.current_time() == start


def _expire(deadline: Deadline) -> None:
    deadline.expire("second SIGTERM")


def _shorten(deadline: Deadline) -> None:
    # The kubernetes plugin learns that the pod really has 5 s left.
    deadline.shorten(5, "pod deletion deadline")


@pytest.mark.parametrize(
    ("change", "ends_after"),
    [(_expire, 3.0), (_shorten, 3 + 5 - 5 * 0.1 * 2)],  # less the shortened reserve
    ids=["second signal", "shortened deadline"],
)
async def test_follows_later_changes_of_the_deadline(
    tmp_path: Path,
    autojump_clock: trio.testing.MockClock,
    change: Callable[[Deadline], None],
    ends_after: float,
) -> None:
    settings, config = configure(supervisor_sleep, tmp_path, CONFIG.format(seconds="15s"), "sleep")
    ctx = make_context("sleep", settings, config)
    deadline = Deadline(30)
    start = trio.current_time()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(supervisor_sleep.supervisor_pre_stop, ctx, deadline)
        await trio.sleep(3)
        change(deadline)
    assert trio.current_time() - start == pytest.approx(ends_after)


@pytest.mark.parametrize(
    ("section", "expected"),
    [
        (
            "seconds: abc",
            "cfg.yaml:4:14: plugins.sleep.seconds: invalid duration 'abc': use a number of seconds",
        ),
        (
            "seconds: -1",
            "cfg.yaml:4:14: plugins.sleep.seconds: a duration must be a finite number >= 0",
        ),
        ("{}", "cfg.yaml:3:10: plugins.sleep: missing required key 'seconds'"),
        (
            "secnds: 5s",
            "cfg.yaml:4:5: unknown key 'secnds' in plugins.sleep (did you mean 'seconds'?)",
        ),
    ],
)
def test_bad_settings_are_reported_at_their_position(tmp_path: Path, section: str, expected: str) -> None:
    text = f"grace_period: 30s\nplugins:\n  sleep:\n    {section}\n"
    if section == "{}":
        text = "grace_period: 30s\nplugins:\n  sleep: {}\n"
    problems = configure_problems(supervisor_sleep, tmp_path, text, "sleep")
    # The first problem is the one in question (a misspelt key is also a missing one).
    assert problems[0].startswith(str(tmp_path / expected)), problems


def test_hook_timeout_is_allowed_in_the_section(tmp_path: Path) -> None:
    text = "plugins:\n  sleep: {seconds: 5s, hook_timeout: 10s}\n"
    assert configure_problems(supervisor_sleep, tmp_path, text, "sleep") == []


def test_registered_as_an_entry_point() -> None:
    (entry,) = [ep for ep in importlib.metadata.entry_points(group="supervisor.plugins") if ep.name == "sleep"]
    assert entry.load() is supervisor_sleep
    assert entry.dist is not None and entry.dist.name == "pid1-supervisor-sleep"


async def test_no_sleep_when_the_deadline_has_passed(tmp_path: Path, autojump_clock: trio.testing.MockClock) -> None:
    deadline = Deadline(30)
    deadline.expire("second SIGTERM")
    elapsed, messages = await _sleep_hook(tmp_path, "15s", deadline)
    assert elapsed == 0
    assert messages == ["not sleeping: the shutdown deadline leaves no time for hooks"]
