"""Actions bound to phases: the shared shape of plugins like ``exec`` and ``http``.

Such a plugin lets users attach things (commands, requests) to any phase,
each entry with a ``phase:`` and, for the per-process phases, a ``process:``.
``read_phase`` validates those two keys the same way for every plugin, and
``PhasePlugin`` implements every phase hook by calling one ``run``
function, so a plugin of this kind is its settings parser and its runner::

    plugin = PhasePlugin(configure=parse, run=run_phase, doc=__doc__)

with ``[project.entry-points."supervisor.plugins"] exec = "supervisor_exec:plugin"``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from ._context import Context, ProcessInfo
from ._deadline import Deadline
from ._status import ExitStatus
from .config import Config, Settings
from .hookspec import SKIP, hookimpl

__all__ = ["PHASES", "PROCESS_PHASES", "PhasePlugin", "read_phase"]

# In the order a run goes through them; ``wind_down`` runs beside
# ``pre_stop`` (and goes on when the main process exits), so it comes next.
PHASES = (
    "startup",
    "shutdown_started",
    "pre_stop",
    "wind_down",
    "before_process_stop",
    "after_process_stop",
    "post_stop",
)
PROCESS_PHASES = frozenset({"before_process_stop", "after_process_stop"})

RunPhase = Callable[[Context, str, Deadline | None, ProcessInfo | None, ExitStatus | None], Awaitable[object]]
"""``run(ctx, phase, deadline, process, status)``: run what is configured
for the phase (and process); return something true if there was anything
(the list of results, say)."""


def read_phase(entry: Settings, config: Config, *, noun: str = "entries") -> tuple[str | None, str | None]:
    """Read and check an entry's ``phase`` and ``process`` keys.

    ``process`` is required for the per-process phases, must name a
    configured process, and is refused elsewhere.  Problems are recorded on
    ``entry``; the values are None where they are missing or wrong.  ``noun``
    names the entries in messages ("commands", "requests").
    """
    phase = entry.string("phase", required=True, choices=PHASES)
    process = entry.string("process")
    known = [p.name for p in config.processes]
    among = f" (processes: {', '.join(known)})" if known else " (no processes are configured)"
    if phase in PROCESS_PHASES:
        if process is None:
            entry.error(None, f"missing required key 'process' ({phase} {noun} belong to a process)")
        elif process not in known:
            entry.error("process", f"unknown process {process!r}{among}")
            process = None
    elif process is not None and phase is not None:
        entry.error(
            "process", f"only before_process_stop and after_process_stop {noun} belong to a process, not {phase}"
        )
        process = None
    return phase, process


class PhasePlugin:
    """Every phase hook, each calling ``run`` for its phase.

    A call with nothing configured returns ``SKIP``, so it stays out of the
    shutdown timeline.
    """

    def __init__(
        self, *, configure: Callable[[Settings, Config], object], run: RunPhase, doc: str | None = None
    ) -> None:
        self._configure = configure
        self._run = run
        self.__doc__ = doc

    async def _phase(
        self,
        ctx: Context,
        phase: str,
        deadline: Deadline | None,
        process: ProcessInfo | None = None,
        status: ExitStatus | None = None,
    ) -> object:
        return None if await self._run(ctx, phase, deadline, process, status) else SKIP

    @hookimpl
    def supervisor_configure(self, settings: Settings, config: Config) -> object:
        return self._configure(settings, config)

    @hookimpl
    async def supervisor_startup(self, ctx: Context) -> object:
        return await self._phase(ctx, "startup", None)

    @hookimpl
    async def supervisor_shutdown_started(self, ctx: Context, deadline: Deadline) -> object:
        return await self._phase(ctx, "shutdown_started", deadline)

    @hookimpl
    async def supervisor_pre_stop(self, ctx: Context, deadline: Deadline) -> object:
        return await self._phase(ctx, "pre_stop", deadline)

    @hookimpl
    async def supervisor_wind_down(self, ctx: Context, deadline: Deadline) -> object:
        return await self._phase(ctx, "wind_down", deadline)

    @hookimpl
    async def supervisor_before_process_stop(self, ctx: Context, deadline: Deadline, process: ProcessInfo) -> object:
        return await self._phase(ctx, "before_process_stop", deadline, process)

    @hookimpl
    async def supervisor_after_process_stop(
        self, ctx: Context, deadline: Deadline, process: ProcessInfo, status: ExitStatus
    ) -> object:
        return await self._phase(ctx, "after_process_stop", deadline, process, status)

    @hookimpl
    async def supervisor_post_stop(self, ctx: Context, deadline: Deadline) -> object:
        return await self._phase(ctx, "post_stop", deadline)
