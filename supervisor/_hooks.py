"""What the orchestrator and the shutdown plan call to run hooks, written once.

``HookRunner`` holds the calls' signatures; what a runner does with a call
is one method taking one ``HookCall`` (or one ``Binding``), overridden by
the plugin host.  The base class itself has no implementation of any hook,
which is exactly the runner of a deployment that names no plugins
(``NoPlugins``): the same calls, no pluggy, no entry-point scan — that
import alone (pluggy pulls in importlib.metadata and the email package) is
~6 MiB and ~20 ms of start-up that a plain ``supervisor -- COMMAND`` would
pay for nothing.  So this module must not import trio or pluggy.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    # Types only: the command line uses NoPlugins before trio is imported.
    import trio

    from ._context import ProcessInfo
    from ._deadline import Deadline
    from ._phase import Phase
    from ._timeline import Timeline
    from .config import Config
    from .health.board import Board

__all__ = ["Binding", "HookCall", "HookRunner", "NoPlugins"]


@dataclass(frozen=True)
class HookCall:
    """One call of a hook, for every implementation of it.

    ``arguments`` are the hook's own (``process``, ``status``, ``reason``...);
    the runner adds ``ctx`` and ``deadline``.  With a ``deadline`` each
    implementation runs until the deadline less its reserve; with a
    ``phase`` each is recorded in the timeline as one step, named
    ``step_name`` (the process, for per-process phases) or after the hook.
    """

    hook: str
    arguments: Mapping[str, Any] = field(default_factory=dict)
    deadline: Deadline | None = None
    phase: Phase | None = None
    step_name: str | None = None

    @property
    def step(self) -> str:
        return self.step_name or self.hook.removeprefix("supervisor_")


@dataclass(frozen=True)
class Binding:
    """What the hooks' contexts are made of, once the processes exist;
    ``board`` takes what plugins report (``ctx.report_health``)."""

    config: Config
    processes: Mapping[str, ProcessInfo]
    timeline: Timeline
    main_exited: trio.Event
    board: Board | None = None


class HookRunner:
    """Runs hooks for the orchestrator and the plan; without plugins, none.

    The four calls below are the whole interface and are never overridden;
    a runner with implementations overrides ``bound``, ``run``, ``spawn``
    and ``implementations``.  None of them raises for a hook's failure (a
    plugin's bug is a log line and a timeline entry), only trio.Cancelled
    from an outer scope goes through.
    """

    def bind(
        self,
        config: Config,
        processes: Mapping[str, ProcessInfo],
        timeline: Timeline,
        main_exited: trio.Event,
        board: Board | None = None,
    ) -> None:
        """Give the hooks their contexts, once the processes exist."""
        self.bound(Binding(config, processes, timeline, main_exited, board))

    async def call(
        self,
        hook_name: str,
        *,
        deadline: Deadline | None = None,
        phase: Phase | None = None,
        step_name: str | None = None,
        **arguments: Any,
    ) -> None:
        """Run every implementation of ``hook_name`` and wait for all (see HookCall)."""
        await self.run(HookCall(hook_name, arguments, deadline=deadline, phase=phase, step_name=step_name))

    def start_soon(self, nursery: trio.Nursery, hook_name: str, **arguments: Any) -> None:
        """Fire and forget, for process events: the implementations run in
        ``nursery``, each bounded by its hook timeout."""
        self.spawn(nursery, HookCall(hook_name, arguments))

    def implementations(self, hook_name: str) -> Sequence[object]:
        """What would run for ``hook_name`` (the plan skips a phase with none)."""
        return ()

    def bound(self, binding: Binding) -> None:
        """``bind``'s work."""

    async def run(self, call: HookCall) -> None:
        """``call``'s work."""

    def spawn(self, nursery: trio.Nursery, call: HookCall) -> None:
        """``start_soon``'s work."""


class NoPlugins(HookRunner):
    """The hook runner of a deployment without plugins."""
