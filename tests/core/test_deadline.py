"""The shutdown Deadline and Timeline, on trio's MockClock (no real sleeps)."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from supervisor import Deadline, Timeline


async def test_remaining_counts_down(autojump_clock: trio.testing.MockClock) -> None:
    deadline = Deadline(10.0)
    assert deadline.remaining() == pytest.approx(10.0)
    assert deadline.reserve == pytest.approx(1.0)
    await trio.sleep(4)
    assert deadline.remaining() == pytest.approx(6.0)
    assert deadline.remaining_for_hooks() == pytest.approx(5.0)


async def test_small_budget_keeps_a_proportional_reserve() -> None:
    assert Deadline(2.0).reserve == pytest.approx(0.2)


async def test_hook_scope_ends_before_escalation(autojump_clock: trio.testing.MockClock) -> None:
    deadline = Deadline(10.0)
    with deadline.scope() as scope:
        await trio.sleep(100)
    assert scope.cancelled_caught
    assert deadline.remaining() == pytest.approx(deadline.reserve)


async def test_stop_scope_runs_to_the_deadline(autojump_clock: trio.testing.MockClock) -> None:
    deadline = Deadline(10.0)
    with deadline.scope(keep_reserve=False):
        await trio.sleep(100)
    assert deadline.remaining() == pytest.approx(0.0)
    assert deadline.expired


async def test_own_timeout_wins_when_shorter(autojump_clock: trio.testing.MockClock) -> None:
    deadline = Deadline(10.0)
    start = trio.current_time()
    with deadline.scope(timeout=2.0):
        await trio.sleep(100)
    assert trio.current_time() - start == pytest.approx(2.0)


async def test_shorten_moves_waiting_scopes(autojump_clock: trio.testing.MockClock) -> None:
    deadline = Deadline(30.0)
    start = trio.current_time()

    async def learn_real_deadline() -> None:
        await trio.sleep(1)
        assert deadline.shorten(5.0, "pod deletion deadline")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(learn_real_deadline)
        with deadline.scope(keep_reserve=False):
            await trio.sleep(100)
    assert trio.current_time() - start == pytest.approx(6.0)
    assert deadline.reasons == ["pod deletion deadline"]


async def test_shorten_never_extends() -> None:
    deadline = Deadline(5.0)
    assert not deadline.shorten(10.0, "later")
    assert deadline.remaining() <= 5.0


async def test_expire_cancels_everything_at_once(autojump_clock: trio.testing.MockClock) -> None:
    deadline = Deadline(30.0)
    start = trio.current_time()

    async def second_sigterm() -> None:
        await trio.sleep(2)
        deadline.expire("second SIGTERM")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(second_sigterm)
        with deadline.scope(keep_reserve=False):
            await trio.sleep(100)
    assert trio.current_time() - start == pytest.approx(2.0)
    assert deadline.remaining() == 0


async def test_timeline_records_outcomes(autojump_clock: trio.testing.MockClock) -> None:
    timeline = Timeline()
    with timeline.step("pre_stop", "sleep", plugin="sleep"):
        await trio.sleep(1.5)
    with trio.move_on_after(1), timeline.step("pre_stop", "drain", plugin="kubernetes"):
        await trio.sleep(10)
    with pytest.raises(ValueError), timeline.step("post_stop", "cleanup"):
        raise ValueError("boom")
    records = timeline.as_json()
    assert [(r["name"], r["outcome"]) for r in records] == [
        ("sleep", "ok"),
        ("drain", "cancelled"),
        ("cleanup", "error"),
    ]
    assert records[0]["duration"] == pytest.approx(1.5)
    assert records[1]["start"] == pytest.approx(1.5)
    text = timeline.render()
    assert "sleep: sleep" in text[0] and text[0].rstrip().endswith("ok")
    assert "ValueError: boom" in text[2]


async def test_the_step_in_progress_is_the_latest_still_running_never_one_already_over() -> None:
    # What PID 1 names at the wall: a hook whose sub-steps are over is still
    # the step in progress, not its last sub-step.
    heard: list[tuple[str, bool]] = []
    timeline = Timeline(on_step=lambda step, running: heard.append((step.name, running)))
    with timeline.step("wind_down", "wind_down", plugin="libvirt"):
        with timeline.step("wind_down", "domain a", plugin="libvirt"), timeline.step("wind_down", "domain b"):
            pass
        assert heard[-1] == ("wind_down", True)
    assert heard == [
        ("wind_down", True),
        ("domain a", True),
        ("domain b", True),
        ("domain a", True),
        ("wind_down", True),
        ("wind_down", False),
    ]


async def test_cancellation_wrapped_by_a_nursery_is_recorded_as_cancelled(
    autojump_clock: trio.testing.MockClock,
) -> None:
    timeline = Timeline()

    async def wait() -> None:
        await trio.sleep(10)

    with trio.move_on_after(1), timeline.step("pre_stop", "two waits", plugin="exec"):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(wait)
            nursery.start_soon(wait)
    assert timeline.steps[0].outcome == "cancelled"


async def test_a_budget_that_started_earlier_counts_from_then(autojump_clock: trio.testing.MockClock) -> None:
    # A SIGTERM that arrived 0.3 s before trio could handle it.
    deadline = Deadline(2.0, elapsed=0.3)
    assert deadline.remaining() == pytest.approx(1.7)
    assert deadline.elapsed() == pytest.approx(0.3)


async def test_slack_is_a_capped_share_of_what_hooks_have_left(autojump_clock: trio.testing.MockClock) -> None:
    deadline = Deadline(30.0)  # hooks have 29 s: 30 less the 1 s reserve
    assert deadline.slack(0.5) == pytest.approx(0.5)  # 10 % would be 2.9 s; capped
    assert deadline.slack(5.0, 0.5) == pytest.approx(5.0)
    await trio.sleep(27.0)  # 2 s left for hooks
    assert deadline.slack(0.5) == pytest.approx(0.2)
    assert deadline.slack(0.5, 0.2, of=1.0) == pytest.approx(0.2)


async def test_shortened_deadline_keeps_its_reserve_unless_it_would_crowd_out_hooks(
    autojump_clock: trio.testing.MockClock,
) -> None:
    deadline = Deadline(30.0)
    assert deadline.shorten(10.0, "pod deletion deadline")
    assert deadline.reserve == pytest.approx(1.0)  # stopping takes as long as before
    assert deadline.shorten(2.0, "pod deletion deadline")
    assert deadline.reserve == pytest.approx(0.4)  # a fifth of the 2 s left
    assert deadline.remaining_for_hooks() == pytest.approx(1.6)


async def test_time_kept_for_later_is_held_back_from_hooks_until_handed_back(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A drain that fills the budget must leave what a step after the stops
    asked for (a Lease release)."""
    deadline = Deadline(10.0)
    deadline.keep_for_later(1.5)
    assert deadline.remaining_for_hooks() == pytest.approx(10.0 - 1.0 - 1.5)
    with deadline.scope() as scope:
        await trio.sleep(100)
    assert scope.cancelled_caught
    assert deadline.remaining() == pytest.approx(1.0 + 1.5)
    deadline.hand_back()
    assert deadline.remaining_for_hooks() == pytest.approx(1.5)


async def test_more_than_hooks_have_is_never_kept(autojump_clock: trio.testing.MockClock) -> None:
    deadline = Deadline(2.0)
    deadline.keep_for_later(5.0)
    assert deadline.kept == pytest.approx(2.0 - 0.2)
    assert deadline.remaining_for_hooks() == 0.0


async def test_nothing_left_to_stop_frees_the_reserve_for_waiting_hooks(
    autojump_clock: trio.testing.MockClock,
) -> None:
    deadline = Deadline(10.0)
    start = trio.current_time()

    async def last_process_stopped() -> None:
        await trio.sleep(8)
        deadline.nothing_left_to_stop()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(last_process_stopped)
        with deadline.scope() as scope:
            await trio.sleep(100)
    assert scope.cancelled_caught
    # Up to the escalation moment, not the reserve before it.
    assert trio.current_time() - start == pytest.approx(10.0)
