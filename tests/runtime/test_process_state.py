"""A process's lifecycle follows the one transition table, as seen through
``SupervisedProcess.state`` while real child processes start, crash, back off,
restart and stop."""

from __future__ import annotations

import pytest
import trio

from supervisor import ExitStatus, ProcessState
from supervisor._deadline import Deadline
from supervisor.config import Backoff, ProcessSpec
from supervisor.config._model import ReadyCheck
from supervisor.runtime import SupervisedProcess
from supervisor.runtime.state import TRANSITIONS, IllegalTransition, check_transition


class Recorder:
    def __init__(self) -> None:
        self.failed: list[str] = []

    def process_started(self, process: SupervisedProcess) -> None:
        pass

    def process_exited(self, process: SupervisedProcess, status: ExitStatus, will_restart: bool) -> None:
        pass

    def process_restarted(self, process: SupervisedProcess, attempt: int) -> None:
        pass

    def process_failed(self, process: SupervisedProcess, reason: str) -> None:
        self.failed.append(reason)


def test_every_state_has_a_row_and_no_self_loops() -> None:
    assert set(TRANSITIONS) == set(ProcessState)
    for state, targets in TRANSITIONS.items():
        assert state not in targets
    # Every state is reachable from PENDING.
    seen, todo = {ProcessState.PENDING}, [ProcessState.PENDING]
    while todo:
        for nxt in TRANSITIONS[todo.pop()]:
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    assert seen == set(ProcessState)


def test_a_move_outside_the_table_is_refused() -> None:
    with pytest.raises(IllegalTransition, match="stopped → running"):
        check_transition("web", ProcessState.STOPPED, ProcessState.RUNNING)


async def _wait_for(process: SupervisedProcess, state: ProcessState) -> None:
    with trio.fail_after(20):
        while process.state is not state:
            await trio.sleep(0.01)


async def test_start_ready_stop() -> None:
    spec = ProcessSpec(name="svc", command=("sleep", "30"))
    process = SupervisedProcess(spec, Recorder())
    assert process.state is ProcessState.PENDING
    async with trio.open_nursery() as nursery:
        await nursery.start(process.supervise)
        assert await process.wait_ready() is None
        assert process.state is ProcessState.RUNNING
        status = await process.stop(Deadline(10.0))
        assert status is not None and not status.success
        await _wait_for(process, ProcessState.STOPPED)


async def test_crash_backoff_restart_then_failed_for_good() -> None:
    events = Recorder()
    spec = ProcessSpec(
        name="crashy",
        command=("sh", "-c", "exit 3"),
        restart="on-failure",
        backoff=Backoff(initial=0.01, max=0.01, max_restarts=2, window=60.0),
    )
    process = SupervisedProcess(spec, events)
    seen: list[ProcessState] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(process.supervise)
        with trio.fail_after(20):
            while process.state is not ProcessState.FAILED:
                if not seen or seen[-1] is not process.state:
                    seen.append(process.state)
                await trio.sleep(0)
    assert ProcessState.BACKOFF in seen
    assert process.restarts == 2
    assert process.failed_for_good
    assert events.failed and "giving up" in events.failed[0]


async def test_stop_during_backoff_ends_it_stopped() -> None:
    spec = ProcessSpec(
        name="flappy",
        command=("sh", "-c", "exit 1"),
        restart="always",
        backoff=Backoff(initial=30.0, max=30.0, max_restarts=5, window=60.0),
    )
    process = SupervisedProcess(spec, Recorder())
    async with trio.open_nursery() as nursery:
        nursery.start_soon(process.supervise)
        await _wait_for(process, ProcessState.BACKOFF)
        await process.stop(Deadline(5.0))
        await _wait_for(process, ProcessState.STOPPED)


async def test_readiness_failure_keeps_it_starting_and_says_why() -> None:
    spec = ProcessSpec(
        name="slow",
        command=("sleep", "30"),
        ready=ReadyCheck(kind="file", target="/nonexistent/ready-marker", timeout=0.3, interval=0.05),
    )
    process = SupervisedProcess(spec, Recorder())
    async with trio.open_nursery() as nursery:
        await nursery.start(process.supervise)
        reason = await process.wait_ready()
        assert reason is not None and "not ready within" in reason
        assert process.state is ProcessState.STARTING
        await process.stop(Deadline(10.0))
    assert process.state is ProcessState.STOPPED
