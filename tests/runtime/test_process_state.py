"""A process's lifecycle follows the one transition table, as seen through
``SupervisedProcess.state`` while real child processes start, crash, back off,
restart and stop."""

from __future__ import annotations

import contextlib
import os
import signal
from typing import Any

import pytest
import trio
import trio.testing

from supervisor import ExitStatus, ProcessState
from supervisor._deadline import Deadline
from supervisor.config import Backoff, ProcessSpec
from supervisor.config._model import ReadyCheck
from supervisor.runtime import SupervisedProcess
from supervisor.runtime.child import Child, open_child
from supervisor.runtime.state import TRANSITIONS, IllegalTransition, check_transition


def state(process: SupervisedProcess) -> ProcessState:
    # A call, so that the type checker does not carry one assert's answer
    # over the awaits to the next one.
    return process.state


def liveness(process: SupervisedProcess) -> tuple[bool, int | None]:
    return process.running, process.pid


class Recorder:
    """The events a process reports, and one to wait on: its first exit
    with a restart to come (it is in BACKOFF then)."""

    def __init__(self) -> None:
        self.failed: list[str] = []
        self.exits: list[tuple[ExitStatus, bool]] = []
        self.restarted: list[int] = []
        self.backing_off = trio.Event()

    def process_started(self, process: SupervisedProcess) -> None:
        pass

    def process_exited(self, process: SupervisedProcess, status: ExitStatus, will_restart: bool) -> None:
        if will_restart:
            assert state(process) is ProcessState.BACKOFF
        self.exits.append((status, will_restart))
        if will_restart:
            self.backing_off.set()

    def process_restarted(self, process: SupervisedProcess, attempt: int) -> None:
        self.restarted.append(attempt)

    def process_failed(self, process: SupervisedProcess, reason: str) -> None:
        assert state(process) is ProcessState.FAILED
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


async def test_start_ready_stop() -> None:
    spec = ProcessSpec(name="svc", command=("sleep", "30"))
    process = SupervisedProcess(spec, Recorder())
    assert state(process) is ProcessState.PENDING
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            await nursery.start(process.supervise)
            assert await process.wait_ready() is None
            assert state(process) is ProcessState.RUNNING
            running, pid = liveness(process)
            assert running and pid is not None
            status = await process.stop(Deadline(10.0))
            assert status == ExitStatus(signal=signal.SIGTERM)
            assert liveness(process) == (False, None)
        # supervise() has returned: the stop is complete.
    assert state(process) is ProcessState.STOPPED
    assert process.status == status


async def test_crash_backoff_restart_then_failed_for_good() -> None:
    events = Recorder()
    spec = ProcessSpec(
        name="crashy",
        command=("sh", "-c", "exit 3"),
        restart="on-failure",
        backoff=Backoff(initial=0.01, max=0.01, max_restarts=2, window=60.0),
    )
    process = SupervisedProcess(spec, events)
    with trio.fail_after(30):
        await process.supervise()  # returns once it has failed for good
    assert state(process) is ProcessState.FAILED
    assert events.exits == [(ExitStatus(code=3), True), (ExitStatus(code=3), True), (ExitStatus(code=3), False)]
    assert events.restarted == [1, 2]
    assert process.restarts == 2
    assert len(events.failed) == 1 and "giving up" in events.failed[0]


async def test_stop_during_backoff_ends_it_stopped() -> None:
    events = Recorder()
    spec = ProcessSpec(
        name="flappy",
        command=("sh", "-c", "exit 1"),
        restart="always",
        backoff=Backoff(initial=30.0, max=30.0, max_restarts=5, window=60.0),
    )
    process = SupervisedProcess(spec, events)
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(process.supervise)
            await events.backing_off.wait()
            assert state(process) is ProcessState.BACKOFF
            assert await process.stop(Deadline(5.0)) == ExitStatus(code=1)
            assert state(process) is ProcessState.STOPPED
    # The 30 s backoff did not run out: the stop ended it (fail_after above).
    assert process.restarts == 0
    assert state(process) is ProcessState.STOPPED


async def test_readiness_failure_stops_it_and_it_ends_failed() -> None:
    spec = ProcessSpec(
        name="slow",
        command=("sleep", "30"),
        ready=ReadyCheck(kind="file", target="/nonexistent/ready-marker", timeout=0.3, interval=0.05),
    )
    events = Recorder()
    process = SupervisedProcess(spec, events)
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            await nursery.start(process.supervise)
            reason = await process.wait_ready()
            assert reason is not None and "not ready within 300ms" in reason
        # Nobody probes it any more: it is stopped, and its state says so.
    assert state(process) is ProcessState.FAILED
    assert process.pid is None or not process.running
    assert process.status is not None and process.status.signal == signal.SIGTERM
    assert len(events.failed) == 1 and "not ready within 300ms" in events.failed[0]


async def test_a_stop_during_the_spawn_stops_what_it_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    # The stop lands while the spawn is still in flight (trio spawns in a
    # thread): it must wait for the spawn and stop that process, not find
    # "nothing running" and leave it to run on.
    spawning, go = trio.Event(), trio.Event()

    async def held_spawn(*args: Any) -> Child:
        spawning.set()
        await go.wait()
        return await open_child(*args)

    monkeypatch.setattr("supervisor.runtime.run.open_child", held_spawn)
    spec = ProcessSpec(name="late", command=("sleep", "30"))
    process = SupervisedProcess(spec, Recorder())
    stopped: list[ExitStatus | None] = []

    async def stop() -> None:
        stopped.append(await process.stop(Deadline(10.0)))

    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(process.supervise)
            await spawning.wait()
            assert state(process) is ProcessState.STARTING and not process.running
            nursery.start_soon(stop)
            await trio.testing.wait_all_tasks_blocked()
            assert state(process) is ProcessState.STOPPING and not stopped  # waiting for the spawn
            go.set()
    assert stopped == [ExitStatus(signal=signal.SIGTERM)]
    assert state(process) is ProcessState.STOPPED


async def test_a_stop_right_after_an_exit_ends_stopped() -> None:
    # The process has exited by itself and been reaped, but its output is
    # still being drained (a grandchild holds the pipe): a stop now must not
    # signal the reaped PID, and the process ends STOPPED, not restarted.
    spec = ProcessSpec(name="quick", command=("sh", "-c", "sleep 30 & exit 0"), restart="always")
    process = SupervisedProcess(spec, Recorder())
    group = None
    try:
        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                await nursery.start(process.supervise)
                run = process._run
                assert run is not None and run.child is not None
                group = run.child.pid
                await run.ended.wait()
                assert not process.running and process.pid is None
                assert state(process) is ProcessState.RUNNING  # the supervising task has not moved yet
                assert await process.stop(Deadline(10.0)) == ExitStatus(code=0)
    finally:
        if group is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(group, signal.SIGKILL)
    assert state(process) is ProcessState.STOPPED
    assert process.restarts == 0
