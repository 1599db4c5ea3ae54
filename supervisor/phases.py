"""Actions bound to phases: the shared shape of plugins like ``exec`` and ``http``.

Such a plugin lets users attach things (commands, requests) to any phase,
each entry with a ``phase:`` and, for the per-process phases, a ``process:``.
``read_entries`` reads the list of entries and ``read_phase`` validates
those two keys the same way for every plugin; ``entries_for`` picks a
phase's entries and ``run_each`` runs them concurrently under the deadline;
``PhasePlugin`` implements every phase hook by calling one ``run`` function.
So a plugin of this kind is its entry parser and its runner::

    plugin = PhasePlugin(configure=parse, run=run_phase, doc=__doc__)

with ``[project.entry-points."supervisor.plugins"] exec = "supervisor_exec:plugin"``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Protocol, TypeVar

import trio

from ._context import Context, ProcessInfo
from ._deadline import Deadline
from ._phase import Phase
from ._status import ExitStatus
from .config import Config, Settings
from .hookspec import SKIP, hookimpl

__all__ = [
    "PHASES",
    "PROCESS_PHASES",
    "Phase",
    "PhaseEntry",
    "PhasePlugin",
    "entries_for",
    "plan_entries",
    "read_entries",
    "read_phase",
    "run_each",
]

PHASES: tuple[Phase, ...] = tuple(phase for phase in Phase if phase.has_hook)
"""The phases plugins act in, in the order a run goes through them (every
`Phase` but ``stop``); each is also its plain name (``"pre_stop"``)."""
PROCESS_PHASES: frozenset[Phase] = frozenset(phase for phase in PHASES if phase.per_process)
"""Those of them that happen once for each process."""
_IN_ORDER_PER_PROCESS = tuple(phase for phase in PHASES if phase in PROCESS_PHASES)

RunPhase = Callable[[Context, str, Deadline | None, ProcessInfo | None, ExitStatus | None], Awaitable[object]]
"""``run(ctx, phase, deadline, process, status)``: run what is configured
for the phase (and process); return something true if there was anything
(the list of results, say)."""


class PhaseEntry(Protocol):
    """What ``entries_for`` needs of an entry: its phase, and its process for
    the per-process phases (None elsewhere), as ``read_phase`` returns them."""

    @property
    def phase(self) -> str: ...

    @property
    def process(self) -> str | None: ...


Entry = TypeVar("Entry", bound=PhaseEntry)
Outcome = TypeVar("Outcome")


def read_entries(
    settings: Settings, config: Config, key: str, what: str, parse: Callable[[Settings, Config], Entry | None]
) -> tuple[Entry, ...]:
    """Read the required list ``key`` of a plugin's section, each item with
    ``parse(entry, config)``, which records its problems on ``entry`` and
    returns None for an entry it cannot use.  ``what`` explains the key in
    the message when it is missing ("a list of commands to run")."""
    settings.check_keys([key])
    if key not in settings:
        settings.error(None, f"missing required key {key!r} ({what})")
    parsed = (parse(entry, config) for entry in settings.sections(key))
    return tuple(entry for entry in parsed if entry is not None)


def entries_for(entries: Iterable[Entry], phase: str, process: ProcessInfo | None = None) -> list[Entry]:
    """The entries of ``phase`` (and, for per-process phases, of ``process``), in order."""
    name = process.name if process is not None else None
    return [entry for entry in entries if entry.phase == phase and entry.process == name]


class NamedPhaseEntry(PhaseEntry, Protocol):
    """An entry with a name for logs, the timeline and the plan."""

    @property
    def name(self) -> str: ...


def plan_entries(entries: Iterable[NamedPhaseEntry]) -> dict[str, str]:
    """A settings object's ``plan()`` (see ``supervisor_configure``) for
    entries bound to phases: each phase (``before_process_stop:NAME`` for a
    process's) that has entries, mapped to their names."""
    plan: dict[str, list[str]] = {}
    for entry in entries:
        key = f"{entry.phase}:{entry.process}" if entry.process else entry.phase
        plan.setdefault(key, []).append(entry.name)
    return {key: ", ".join(names) for key, names in plan.items()}


async def run_each(
    entries: Sequence[Entry],
    run: Callable[[Entry, trio.Nursery], Awaitable[Outcome]],
    deadline: Deadline | None,
) -> list[Outcome]:
    """Run ``run(entry, nursery)`` for every entry concurrently; return the
    outcomes in the entries' order, without those of runs the deadline
    cancelled.

    ``nursery`` is the one the runs are in, for helpers a run starts (a
    command's output pumps), which then end with the runs.  The deadline's
    scope is entered here although the host runs hooks under it as well: a
    plugin must not depend on its caller to stay inside the budget.
    """
    outcomes: list[tuple[Outcome] | None] = [None] * len(entries)

    async def run_one(index: int, entry: Entry, nursery: trio.Nursery) -> None:
        outcomes[index] = (await run(entry, nursery),)

    async def run_all() -> None:
        async with trio.open_nursery() as nursery:
            for index, entry in enumerate(entries):
                nursery.start_soon(run_one, index, entry, nursery)

    if deadline is None:
        await run_all()
    else:
        with deadline.scope():
            await run_all()
    return [outcome[0] for outcome in outcomes if outcome is not None]


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
        entry.error("process", f"only {' and '.join(_IN_ORDER_PER_PROCESS)} {noun} belong to a process, not {phase}")
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
        phase: Phase,
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
        return await self._phase(ctx, Phase.STARTUP, None)

    @hookimpl
    async def supervisor_shutdown_started(self, ctx: Context, deadline: Deadline) -> object:
        return await self._phase(ctx, Phase.SHUTDOWN_STARTED, deadline)

    @hookimpl
    async def supervisor_pre_stop(self, ctx: Context, deadline: Deadline) -> object:
        return await self._phase(ctx, Phase.PRE_STOP, deadline)

    @hookimpl
    async def supervisor_wind_down(self, ctx: Context, deadline: Deadline) -> object:
        return await self._phase(ctx, Phase.WIND_DOWN, deadline)

    @hookimpl
    async def supervisor_before_process_stop(self, ctx: Context, deadline: Deadline, process: ProcessInfo) -> object:
        return await self._phase(ctx, Phase.BEFORE_PROCESS_STOP, deadline, process)

    @hookimpl
    async def supervisor_after_process_stop(
        self, ctx: Context, deadline: Deadline, process: ProcessInfo, status: ExitStatus
    ) -> object:
        return await self._phase(ctx, Phase.AFTER_PROCESS_STOP, deadline, process, status)

    @hookimpl
    async def supervisor_post_stop(self, ctx: Context, deadline: Deadline) -> object:
        return await self._phase(ctx, Phase.POST_STOP, deadline)
