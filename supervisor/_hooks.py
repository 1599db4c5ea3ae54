"""What the orchestrator and the shutdown plan need from the plugin host.

A deployment that names no plugins gets ``NoPlugins``: the same calls, no
pluggy, no entry-point scan — that import alone (pluggy pulls in
importlib.metadata and the email package) is ~6 MiB and ~20 ms of start-up
that a plain ``supervisor -- COMMAND`` would pay for nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    # Types only: the command line uses NoPlugins before trio is imported.
    import trio

    from ._context import ProcessInfo
    from ._deadline import Deadline
    from ._timeline import Timeline
    from .config import Config
    from .health.board import Board

__all__ = ["HookRunner", "NoPlugins"]


class HookRunner(Protocol):
    def bind(
        self,
        config: Config,
        processes: Mapping[str, ProcessInfo],
        timeline: Timeline,
        main_exited: trio.Event,
        board: Board | None = None,
    ) -> None: ...

    def implementations(self, hook_name: str) -> list[Any]: ...

    async def call(
        self,
        hook_name: str,
        *,
        deadline: Deadline | None = None,
        phase: str | None = None,
        step_name: str | None = None,
        **kwargs: Any,
    ) -> None: ...

    def start_soon(self, nursery: trio.Nursery, hook_name: str, **kwargs: Any) -> None: ...


class NoPlugins:
    """The hook runner of a deployment without plugins."""

    def bind(
        self,
        config: Config,
        processes: Mapping[str, ProcessInfo],
        timeline: Timeline,
        main_exited: trio.Event,
        board: Board | None = None,
    ) -> None:
        pass

    def implementations(self, hook_name: str) -> list[Any]:
        return []

    async def call(
        self,
        hook_name: str,
        *,
        deadline: Deadline | None = None,
        phase: str | None = None,
        step_name: str | None = None,
        **kwargs: Any,
    ) -> None:
        pass

    def start_soon(self, nursery: trio.Nursery, hook_name: str, **kwargs: Any) -> None:
        pass
