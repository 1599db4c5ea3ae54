"""The orchestrator's shutdown state: RUNNING until the first trigger,
STOPPING with the shutdown's facts, HURRYING once the deadline is expired
(a second stop signal, or a plugin's ``Deadline.expire``); every move through
the one table of ``supervisor.pid1.state``.

The orchestrator runs for real in trio here (no processes, no control
socket); signals are handed to it as its signal receiver would.
"""

from __future__ import annotations

import os
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import trio
import trio.testing

from supervisor import Deadline
from supervisor._hooks import NoPlugins
from supervisor._orchestrator import Orchestrator
from supervisor._shutdown import Shutdown, ShutdownTracker
from supervisor.config import Config
from supervisor.config._model import ControlSettings
from supervisor.pid1.protocol import Reached, StatusPipe, StatusReader
from supervisor.pid1.state import IllegalShutdownTransition, ShutdownState


@asynccontextmanager
async def running(orchestrator: Orchestrator, codes: list[int]) -> AsyncIterator[None]:
    """``orchestrator.run()`` in the background, up and waiting for a trigger
    inside the block; its exit code lands in ``codes`` when it ends."""

    async def run() -> None:
        codes.append(await orchestrator.run())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(run)
        await trio.testing.wait_all_tasks_blocked()
        yield


def _orchestrator(grace: float = 30.0) -> Orchestrator:
    return Orchestrator(Config(grace_period=grace, control=ControlSettings(enabled=False)), NoPlugins())


async def test_a_stop_signal_starts_the_shutdown_and_a_second_one_hurries_it() -> None:
    orchestrator = _orchestrator()
    codes: list[int] = []
    async with running(orchestrator, codes):
        assert orchestrator.shutdown_state is ShutdownState.RUNNING
        assert orchestrator.shutdown is None
        assert orchestrator.services.operations.status()["shutdown"] is None
        orchestrator._on_signal(signal.SIGTERM)
        shutdown = orchestrator.shutdown
        assert orchestrator.shutdown_state is ShutdownState.STOPPING
        assert shutdown is not None and shutdown.reason == "received SIGTERM"
        assert shutdown.signal == signal.SIGTERM and shutdown.deadline.budget == 30.0
        # What `supervisor status --json` answers.
        assert orchestrator.services.operations.status()["shutdown"]["state"] == "stopping"
        orchestrator._on_signal(signal.SIGINT)
        assert orchestrator.shutdown_state is ShutdownState.HURRYING
        assert orchestrator.services.operations.status()["shutdown"]["state"] == "hurrying"
        # The same shutdown, its deadline expired: nothing was started anew.
        assert orchestrator.shutdown is shutdown
        assert shutdown.deadline.reasons == ["second SIGINT"] and shutdown.deadline.expired
        orchestrator._on_signal(signal.SIGTERM)
        assert orchestrator.shutdown_state is ShutdownState.HURRYING
    # No main process: the shutdown ends with 0.
    assert codes == [0]


async def test_a_plugin_that_expires_the_deadline_hurries_the_shutdown() -> None:
    orchestrator = _orchestrator()
    codes: list[int] = []
    async with running(orchestrator, codes):
        orchestrator.request_shutdown("main process web exited with status 0")
        shutdown = orchestrator.shutdown
        assert shutdown is not None and shutdown.signal is None
        assert orchestrator.shutdown_state is ShutdownState.STOPPING
        # From a worker thread, as a plain ``def`` hook would call it.
        await trio.to_thread.run_sync(shutdown.deadline.expire, "the plugin gave up")
        assert orchestrator.shutdown_state is ShutdownState.HURRYING
    assert codes == [0]


async def test_a_later_trigger_does_not_replace_the_shutdown_under_way() -> None:
    orchestrator = _orchestrator(grace=5.0)
    codes: list[int] = []
    async with running(orchestrator, codes):
        orchestrator._on_signal(signal.SIGTERM)
        first = orchestrator.shutdown
        orchestrator.request_shutdown("web failed: crash loop")
        assert orchestrator.shutdown is first and orchestrator.shutdown_state is ShutdownState.STOPPING
    assert codes == [0]


async def test_the_tracker_moves_only_through_the_table() -> None:
    tracker = ShutdownTracker()
    assert tracker.state is ShutdownState.RUNNING and tracker.current is None
    assert not tracker.begun.is_set()
    shutdown = Shutdown("received SIGTERM", trio.current_time(), Deadline(10.0), signal.SIGTERM)
    tracker.begin(shutdown)
    assert tracker.state is ShutdownState.STOPPING and tracker.current is shutdown
    assert tracker.begun.is_set() and await tracker.wait() is shutdown
    with pytest.raises(IllegalShutdownTransition, match="stopping → stopping"):
        tracker.begin(Shutdown("again", trio.current_time(), Deadline(10.0)))
    assert tracker.current is shutdown
    tracker.hurry()
    tracker.hurry()
    assert tracker.state is ShutdownState.HURRYING


async def test_hurrying_before_any_shutdown_is_refused() -> None:
    tracker = ShutdownTracker()
    with pytest.raises(IllegalShutdownTransition, match="running → hurrying"):
        tracker.hurry()


async def test_pid1_is_told_each_state_the_orchestrator_enters_once() -> None:
    read_end, write_end = os.pipe()
    orchestrator = Orchestrator(
        Config(grace_period=30.0, control=ControlSettings(enabled=False)), NoPlugins(), status=StatusPipe(write_end)
    )
    codes: list[int] = []
    try:
        async with running(orchestrator, codes):
            orchestrator._on_signal(signal.SIGTERM)
            orchestrator._on_signal(signal.SIGTERM)
            orchestrator._on_signal(signal.SIGTERM)
        os.set_blocking(read_end, False)  # as PID 1 reads it
        reached = [m for m in StatusReader(read_end).read() if isinstance(m, Reached)]
    finally:
        os.close(read_end)
        os.close(write_end)
    assert reached == [Reached(ShutdownState.STOPPING), Reached(ShutdownState.HURRYING)]
