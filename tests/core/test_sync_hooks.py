"""Plain ``def`` hooks run in a worker thread: blocking ones do not freeze
the event loop, are abandoned when their time is up, and may use the
deadline and the timeline from there."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import trio

from supervisor import Deadline, Timeline, hookimpl
from supervisor._pluginhost import PluginHost
from supervisor.config import load_config
from tests.helpers import empty_host


class Blocking:
    def __init__(self) -> None:
        self.thread: threading.Thread | None = None
        self.entered: trio.Event | None = None
        self.released = threading.Event()

    @hookimpl
    def supervisor_pre_stop(self, ctx: object, deadline: Deadline) -> None:
        self.thread = threading.current_thread()
        with ctx.timeline.step("pre_stop", "inner", plugin="blocking"):  # type: ignore[attr-defined]
            deadline.shorten(1.0, "learned in a thread")
        if self.entered is not None:
            trio.from_thread.run_sync(self.entered.set)
        self.released.wait(30)  # blocking I/O, as far as trio can tell


def _host(tmp_path: Path, plugin: object) -> tuple[PluginHost, Timeline]:
    path = tmp_path / "deploy.yaml"
    path.write_text("plugins:\n  blocking: {}\n")
    config = load_config(str(path), environ={})
    host = empty_host()
    host.add("blocking", plugin)
    host.enable(config)
    timeline = Timeline()
    host.bind(config, {}, timeline, trio.Event())
    return host, timeline


def test_a_blocking_def_hook_leaves_the_loop_free_and_is_abandoned(tmp_path: Path) -> None:
    plugin = Blocking()
    # Loop turns taken while the hook's thread was blocked: the loop was free.
    turns_while_blocked = 0

    async def main() -> tuple[Deadline, float, Timeline]:
        host, timeline = _host(tmp_path, plugin)
        plugin.entered = entered = trio.Event()
        timeline.origin = trio.current_time()
        deadline = Deadline(10.0)
        started = time.monotonic()
        async with trio.open_nursery() as nursery:

            async def tick() -> None:
                nonlocal turns_while_blocked
                await entered.wait()
                while not plugin.released.is_set() and turns_while_blocked < 5:
                    turns_while_blocked += 1
                    await trio.sleep(0)

            nursery.start_soon(tick)
            await host.call("supervisor_pre_stop", deadline=deadline, phase="pre_stop")
            nursery.cancel_scope.cancel()
        return deadline, time.monotonic() - started, timeline

    try:
        deadline, took, timeline = trio.run(main)
    finally:
        plugin.released.set()
    assert plugin.thread is not None and plugin.thread is not threading.main_thread()
    # shorten(1.0) from the thread moved the deadline; the hook's scope ended
    # at it less the reserve and abandoned the thread.
    assert deadline.reasons == ["learned in a thread"]
    assert 0.5 < took < 5.0
    assert turns_while_blocked == 5  # the loop kept running meanwhile
    steps = {(step.name, step.outcome) for step in timeline.steps}
    assert ("inner", "ok") in steps and ("pre_stop", "timeout") in steps, timeline.steps
