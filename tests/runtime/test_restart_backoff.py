"""Restart backoff: delays, jitter bounds, the failure window, the reset."""

from __future__ import annotations

import itertools
import random
import time

import pytest
import trio
import trio.testing

from supervisor import ExitStatus, ProcessState
from supervisor.config import ProcessSpec
from supervisor.config._model import Backoff, RestartPolicy
from supervisor.runtime.backoff import RestartTracker
from supervisor.runtime.restart import AfterExit, after_exit


def crash_loop(tracker: RestartTracker, start: float = 0.0, run_for: float = 0.0) -> list[float]:
    """Drive a process that crashes ``run_for`` seconds after each start;
    returns the granted delays until the tracker gives up."""
    delays: list[float] = []
    now = start
    while len(delays) < 1000:
        tracker.started(now)
        now += run_for
        delay = tracker.next_delay(now)
        if delay is None:
            return delays
        delays.append(delay)
        now += delay
    raise AssertionError("the tracker never gave up")


def test_delays_double_within_equal_jitter_bounds() -> None:
    policy = Backoff(initial=1.0, max=1000.0, max_restarts=8, window=10_000.0)
    delays = crash_loop(RestartTracker(policy, random.Random(1)))
    assert len(delays) == 8
    for n, delay in enumerate(delays):
        exponential = 2.0**n
        assert exponential / 2 <= delay <= exponential


def test_delays_are_capped_at_max() -> None:
    policy = Backoff(initial=1.0, max=5.0, max_restarts=20, window=10_000.0)
    delays = crash_loop(RestartTracker(policy, random.Random(2)))
    assert all(delay <= 5.0 for delay in delays)
    # once the cap is reached every delay stays in [max/2, max]
    assert all(2.5 <= delay <= 5.0 for delay in delays[3:])


def test_same_seed_same_delays_and_jitter_varies() -> None:
    policy = Backoff(initial=1.0, max=30.0, max_restarts=5, window=60.0)
    first = crash_loop(RestartTracker(policy, random.Random(7)))
    second = crash_loop(RestartTracker(policy, random.Random(7)))
    other = crash_loop(RestartTracker(policy, random.Random(8)))
    assert first == second
    assert first != other


def test_fails_for_good_after_max_restarts_in_window() -> None:
    policy = Backoff(initial=1.0, max=30.0, max_restarts=5, window=60.0)
    tracker = RestartTracker(policy, random.Random(3))
    delays = crash_loop(tracker)
    assert len(delays) == 5
    assert tracker.attempt == 5
    # it stays failed while those restarts are inside the window
    assert tracker.next_delay(sum(delays) + 1.0) is None


def test_zero_max_restarts_never_restarts() -> None:
    tracker = RestartTracker(Backoff(max_restarts=0), random.Random(0))
    tracker.started(0.0)
    assert tracker.next_delay(0.5) is None
    assert tracker.attempt == 0


def test_attempt_counts_restarts_inside_the_window() -> None:
    policy = Backoff(initial=1.0, max=1.0, max_restarts=3, window=10.0)
    tracker = RestartTracker(policy, random.Random(4))
    attempts = []
    for now in (0.0, 2.0, 4.0):
        tracker.started(now)
        assert tracker.next_delay(now + 0.5) is not None
        attempts.append(tracker.attempt)
    assert attempts == [1, 2, 3]


def test_old_restarts_slide_out_of_the_window() -> None:
    # Runs of 4 s (shorter than the window, so no reset) with max=1 s delays:
    # a restart every ~5 s, at most 3 in 10 s, so it never fails.
    policy = Backoff(initial=1.0, max=1.0, max_restarts=3, window=10.0)
    tracker = RestartTracker(policy, random.Random(5))
    now = 0.0
    for _ in range(50):
        tracker.started(now)
        now += 4.0
        delay = tracker.next_delay(now)
        assert delay is not None
        assert tracker.attempt <= 3
        now += delay


def test_sliding_window_fails_when_restarts_are_dense() -> None:
    policy = Backoff(initial=0.1, max=0.1, max_restarts=3, window=10.0)
    tracker = RestartTracker(policy, random.Random(6))
    results = []
    for now in (0.0, 1.0, 2.0, 3.0):
        tracker.started(now)
        results.append(tracker.next_delay(now + 0.5))
    assert all(r is not None for r in results[:3])
    assert results[3] is None
    # 10 s after the first restart it has left the window: one more is granted
    tracker.started(10.6)
    assert tracker.next_delay(10.7) is not None


def test_long_run_resets_the_sequence() -> None:
    policy = Backoff(initial=1.0, max=100.0, max_restarts=5, window=60.0)
    tracker = RestartTracker(policy, random.Random(9))
    delays = crash_loop(tracker)[:4]
    assert len(delays) == 4
    tracker = RestartTracker(policy, random.Random(9))
    now = 0.0
    for _ in range(4):
        tracker.started(now)
        delay = tracker.next_delay(now)
        assert delay is not None
        now += delay
    assert tracker.attempt == 4
    # This run stays up longer than the window: the next delay is back at
    # ``initial`` (between 0.5 and 1) and the count restarts at 1.
    tracker.started(now)
    delay = tracker.next_delay(now + 61.0)
    assert delay is not None
    assert 0.5 <= delay <= 1.0
    assert tracker.attempt == 1


def test_run_just_under_the_window_does_not_reset_the_exponent() -> None:
    policy = Backoff(initial=1.0, max=100.0, max_restarts=50, window=60.0)
    tracker = RestartTracker(policy, random.Random(10))
    tracker.started(0.0)
    assert tracker.next_delay(0.0) is not None  # exponent 0
    tracker.started(1.0)
    assert tracker.next_delay(1.0) is not None  # exponent 1
    tracker.started(2.0)
    delay = tracker.next_delay(61.0)  # up 59 s: exponent 2
    assert delay is not None
    assert 2.0 <= delay <= 4.0


def test_huge_number_of_restarts_does_not_overflow() -> None:
    policy = Backoff(initial=1.0, max=2.0, max_restarts=5000, window=1.0)
    tracker = RestartTracker(policy, random.Random(11))
    now = 0.0
    for n in range(3000):
        tracker.started(now)
        delay = tracker.next_delay(now)
        assert delay is not None
        assert (0.5 if n == 0 else 1.0) <= delay <= 2.0
        now += delay


def test_zero_initial_restarts_immediately() -> None:
    tracker = RestartTracker(Backoff(initial=0.0, max=0.0, max_restarts=2), random.Random(12))
    tracker.started(0.0)
    assert tracker.next_delay(1.0) == 0.0


def test_default_rng_gives_jittered_delays_in_bounds() -> None:
    tracker = RestartTracker(Backoff(initial=4.0, max=4.0, max_restarts=100, window=1e9))
    delays = {tracker.next_delay(float(n)) for n in range(20)}
    assert all(d is not None and 2.0 <= d <= 4.0 for d in delays)
    assert len(delays) > 1  # really jittered


async def test_backoff_loop_on_mock_clock_costs_no_real_time(
    autojump_clock: trio.testing.MockClock,
) -> None:
    policy = Backoff(initial=1.0, max=30.0, max_restarts=5, window=600.0)
    tracker = RestartTracker(policy, random.Random(13))
    starts: list[float] = []
    wall = time.monotonic()
    while True:
        now = trio.current_time()
        tracker.started(now)
        starts.append(now)
        await trio.sleep(0.2)  # the process runs a moment, then crashes
        delay = tracker.next_delay(trio.current_time())
        if delay is None:
            break
        await trio.sleep(delay)
    assert time.monotonic() - wall < 5.0  # ~1+2+4+8+16 s of trio time, no real waiting
    assert len(starts) == 6  # the first start and 5 restarts
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    for n, gap in enumerate(gaps):
        assert 0.2 + 2.0**n / 2 <= gap + 1e-9
        assert gap <= 0.2 + 2.0**n + 1e-9


@pytest.mark.parametrize("seed", range(20))
def test_every_delay_between_half_and_full_exponential(seed: int) -> None:
    policy = Backoff(initial=0.5, max=8.0, max_restarts=10, window=1e6)
    delays = crash_loop(RestartTracker(policy, random.Random(seed)), run_for=1.0)
    assert len(delays) == 10
    for n, delay in enumerate(delays):
        base = min(8.0, 0.5 * 2.0**n)
        assert base / 2 <= delay <= base


# -- the policy on top of the delays (supervisor.runtime.restart) -------------------


def decide(
    restart: RestartPolicy,
    status: ExitStatus,
    *,
    main: bool = False,
    requested: bool = False,
    tracker: RestartTracker | None = None,
) -> AfterExit:
    spec = ProcessSpec(
        name="p", command=("x",), restart=restart, main=main, backoff=Backoff(max_restarts=1, window=60.0)
    )
    return after_exit(spec, status, tracker or RestartTracker(spec.backoff), 0.0, restart_requested=requested)


@pytest.mark.parametrize(
    ("restart", "status", "state"),
    [
        ("never", ExitStatus(code=0), ProcessState.EXITED),
        ("never", ExitStatus(code=1), ProcessState.FAILED),
        ("never", ExitStatus(signal=9), ProcessState.FAILED),
        ("on-failure", ExitStatus(code=0), ProcessState.EXITED),
        ("on-failure", ExitStatus(code=1), ProcessState.BACKOFF),
        ("always", ExitStatus(code=0), ProcessState.BACKOFF),
        ("always", ExitStatus(code=2), ProcessState.BACKOFF),
    ],
)
def test_policy_after_an_exit(restart: RestartPolicy, status: ExitStatus, state: ProcessState) -> None:
    verdict = decide(restart, status)
    assert verdict.state is state
    assert (verdict.failure is not None) == (state is ProcessState.FAILED)
    if state is ProcessState.BACKOFF:
        assert 0.5 <= verdict.delay <= 1.0  # the default initial delay, jittered


def test_a_failed_main_process_has_exited_not_failed() -> None:
    # Its exit ends the container with its own code; FAILED would add a
    # second, misleading failure.
    assert decide("never", ExitStatus(code=3), main=True) == AfterExit(ProcessState.EXITED)


def test_a_requested_restart_overrides_never_but_not_the_limit() -> None:
    tracker = RestartTracker(Backoff(max_restarts=1, window=60.0))
    first = decide("never", ExitStatus(signal=15), requested=True, tracker=tracker)
    assert first.state is ProcessState.BACKOFF
    second = decide("never", ExitStatus(signal=15), requested=True, tracker=tracker)
    assert second.state is ProcessState.FAILED
    assert second.failure == "killed by SIGTERM (exit code 143); restarted 1 times within 60s, giving up"
