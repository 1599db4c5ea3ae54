"""The Python floor (benchmarks/floor_init.py) does an init's whole job, as
the benchmark runs it: PID 1 of a new PID namespace, the probe as its child.
A floor that skipped part of the job would make every ratio to it flatter."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator

import pytest

from benchmarks._bench import Bench
from benchmarks._subjects import FLOOR, OURS, Subject, subjects, supervisor_executable

pytestmark = pytest.mark.xdist_group("bench")


@pytest.fixture(scope="module")
def bench() -> Iterator[Bench]:
    with Bench.create(subjects([OURS, FLOOR], supervisor_executable()), smoke=True, verbose=False) as made:
        yield made


@pytest.fixture
def floor(bench: Bench) -> Subject:
    found = bench.floor
    assert found is not None
    return found


def test_signals_reach_the_child_and_its_exit_status_is_pid1s(bench: Bench, floor: Subject) -> None:
    problems: list[str] = []
    with bench.run(floor, ["signals", "{sock}"], label="floor-signals") as run:
        run.ready()
        assert os.readlink(f"/proc/{run.sandbox.pid1}/exe").rsplit("/", 1)[-1].startswith("python")
        for _ in range(3):
            os.kill(run.sandbox.pid1, signal.SIGUSR1)
            run.channel.receive(10, "usr1")
        run.sandbox.signal(signal.SIGTERM)
        run.channel.receive(10, "term")
        run.expect_exit(problems, 0)
    assert problems == []


@pytest.mark.parametrize(("script", "status"), [("exit 3", 3), ("kill -TERM $$", 128 + signal.SIGTERM)])
def test_the_childs_status_or_signal_becomes_pid1s(bench: Bench, floor: Subject, script: str, status: int) -> None:
    problems: list[str] = []
    with bench.run_command(floor, ["sh", "-c", script], label="floor-status") as run:
        run.expect_exit(problems, status)
    assert problems == []


def test_orphans_are_reaped(bench: Bench, floor: Subject) -> None:
    with bench.run(floor, ["orphans", "{sock}", "{dir}/ages", "30", "10"], label="floor-orphans") as run:
        done = run.channel.receive(60, "orphans")
        reaped, lost, zombies = (int(x) for x in done.extra)
        problems: list[str] = []
        run.expect_exit(problems, 0)
    assert (reaped, lost, zombies, problems) == (30, 0, 0, [])
