"""The operator-facing services of one run: control socket, health checks,
probe listener, output ring — wired to the orchestrator in one place.

The orchestrator creates ``Services`` with itself as the ``Pod`` and starts
``run`` in its root nursery before any process starts, so ``status`` works
during start-up and both the socket and the probe listener keep answering
through the shutdown until the orchestrator exits.  ``run_checks`` runs
once start-up is over and ends when the shutdown begins.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Protocol

import trio

from ..health.board import Board
from ..runtime.output import add_line_observer, remove_line_observer
from .logs import LogRing
from .operations import Operations, ShutdownView
from .protocol import default_socket

if TYPE_CHECKING:
    from .._deadline import Deadline
    from .._timeline import Timeline
    from ..config import Config
    from ..pid1.state import ShutdownState
    from ..runtime import SupervisedProcess
    from .replan import Replannable, Replanner

__all__ = ["Pod", "Services"]


class _Shutdown(Protocol):
    """What the services read of a shutdown under way (the orchestrator's
    ``Shutdown``; named here so that this side imports nothing of it)."""

    @property
    def reason(self) -> str: ...
    @property
    def deadline(self) -> Deadline: ...


class Pod(Protocol):
    """What the services read of the orchestrator."""

    @property
    def config(self) -> Config: ...
    @property
    def processes(self) -> Mapping[str, SupervisedProcess]: ...
    @property
    def shutdown(self) -> _Shutdown | None: ...
    @property
    def shutdown_state(self) -> ShutdownState: ...
    @property
    def timeline(self) -> Timeline: ...


class Services:
    def __init__(self, pod: Pod, *, fail: Callable[[str], None]) -> None:
        self.pod = pod
        self.board = Board()
        self.ring = LogRing(pod.config.control.log_lines)
        self.operations = Operations(
            pod.config, pod.processes, self.board, shutdown=self._shutdown_view, timeline=lambda: pod.timeline
        )
        self._fail = fail
        self.monitor = None
        if pod.config.health.checks:
            from ..health.monitor import HealthMonitor

            self.monitor = HealthMonitor(pod.config, pod.processes, self.board, fail=fail)

    def allow_replan(self, pod: Replannable) -> None:
        """Serve ``replan`` requests (see ``supervisor.control.replan``,
        imported with the first)."""

        def make_replanner() -> Replanner:
            from .replan import Replanner

            return Replanner(
                pod,
                nursery=lambda: self.operations.nursery,
                locks=self.operations.locks,
                shutting_down=lambda: self.pod.shutdown_state.shutting_down,
            )

        self.operations.make_replanner = make_replanner

    def _shutdown_view(self) -> ShutdownView | None:
        shutdown = self.pod.shutdown
        if shutdown is None:
            return None
        deadline = shutdown.deadline
        return ShutdownView(shutdown.reason, self.pod.shutdown_state.value, deadline.elapsed(), deadline.remaining())

    async def run(
        self, supervised: trio.Nursery, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Serve until cancelled; ``supervised`` is the nursery that
        ``supervisor start`` runs a process's supervision in."""
        config = self.pod.config
        self.operations.nursery = supervised
        add_line_observer(self.ring.observe)
        try:
            async with trio.open_nursery() as nursery:
                if config.control.enabled:
                    from .server import ControlServer

                    path = config.control.socket or default_socket()
                    await nursery.start(ControlServer(path, self.operations, self.ring).serve)
                if config.health.listen is not None:
                    from ..health.listener import HealthListener

                    await nursery.start(HealthListener(config.health.listen, self.operations).serve)
                task_status.started()
        finally:
            remove_line_observer(self.ring.observe)

    async def run_checks(self, shutdown_requested: trio.Event) -> None:
        """The configured health checks, from the end of start-up until the
        shutdown begins."""
        _return_freed_memory()
        if self.monitor is None or shutdown_requested.is_set():
            return
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self.monitor.run)
            await shutdown_requested.wait()
            nursery.cancel_scope.cancel()


def _return_freed_memory() -> None:
    """Once start-up is over, hand the heap pages it freed back to the kernel.

    Imports, the configuration's parse tree and the start-up's temporaries
    leave freed memory inside glibc's heap, which keeps it; ``malloc_trim``
    returns it (about 0.6 MiB of the idle orchestrator's private memory,
    more than this package costs).
    """
    from .._libc import malloc_trim

    malloc_trim()
