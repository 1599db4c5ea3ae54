"""``supervisor replan``: read the configuration file again and bring the
running processes in line with it, without restarting the container.

A pod's YAML usually comes from a ConfigMap, which changes under a running
pod.  The replan reads the file the supervisor was started with, validates
it completely (the same checks as at start, plugins' sections included):
any problem and nothing changes, the answer lists the problems with their
positions.  Otherwise it compares the processes by name:

- a process only in the new file is started (dependency order);
- a process only in the old one is stopped (reverse dependency order);
- a process whose settings differ is stopped and started with the new ones;
- every other process is left alone: not signalled, not restarted.

What cannot change in a running supervisor is said, not done: the main
process (its exit ends the container), plugins' settings (plugins are
configured once), ``log``, ``control`` and ``health``.  ``grace_period``
and ``shutdown_signals`` take effect at once, for PID 1 too.  ``dry_run`` answers with the
changes and does nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Protocol

import trio

from .._deadline import Deadline
from .._units import format_duration, signal_name
from ..config import Config, ConfigError, ProcessSpec, plain_settings, start_levels, stop_levels

if TYPE_CHECKING:
    from ..runtime import SupervisedProcess

__all__ = ["Changes", "Replannable", "Replanner", "compare"]

log = logging.getLogger("supervisor.control")


class Replannable(Protocol):
    """What a replan needs of the orchestrator."""

    @property
    def config(self) -> Config: ...

    @property
    def processes(self) -> MutableMapping[str, SupervisedProcess]: ...

    def reload_config(self) -> Config:
        """The file read and validated again, the command line applied;
        raises ConfigError with every problem.  Blocking: run in a thread."""

    def new_process(self, spec: ProcessSpec) -> SupervisedProcess:
        """A supervised process for ``spec``, not started."""

    def adopt(self, config: Config) -> None:
        """From now on ``config`` is the configuration (start and stop
        order, grace period); ``processes`` already matches it."""


@dataclass
class Changes:
    """What a replan found: names per kind of change, and what it cannot do."""

    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    changed: dict[str, list[str]] = field(default_factory=dict)  # name → the keys that differ
    unchanged: list[str] = field(default_factory=list)
    applied_settings: list[str] = field(default_factory=list)  # e.g. "grace_period: 30s → 20s"
    needs_restart: list[str] = field(default_factory=list)  # what only a new container applies

    @property
    def empty(self) -> bool:
        return not (self.added or self.removed or self.changed or self.applied_settings or self.needs_restart)

    def lines(self) -> list[str]:
        """The difference, one line per process or setting."""
        lines = [f"+ {name}: new, will be started" for name in self.added]
        lines += [f"- {name}: removed, will be stopped" for name in self.removed]
        lines += [f"~ {name}: changed ({', '.join(keys)}), will be restarted" for name, keys in self.changed.items()]
        lines += [f"= {name}: unchanged, left alone" for name in self.unchanged]
        lines += [f"~ {text}" for text in self.applied_settings]
        lines += [f"! {text}: needs a restart of the container, not applied" for text in self.needs_restart]
        return lines


def compare(old: Config, new: Config) -> Changes:
    """The changes from ``old`` to ``new`` (both valid)."""
    changes = Changes()
    _compare_processes(old, new, changes)
    if old.grace_period != new.grace_period:
        changes.applied_settings.append(
            f"grace_period: {format_duration(old.grace_period)} → {format_duration(new.grace_period)}"
        )
    if old.shutdown_signals != new.shutdown_signals:
        names = [", ".join(signal_name(s) for s in sorted(c.shutdown_signals)) for c in (old, new)]
        changes.applied_settings.append(f"shutdown_signals: {names[0]} → {names[1]}")
    for plugin in sorted({*old.plugins, *new.plugins}):
        if plain_settings(old.plugins.get(plugin)) != plain_settings(new.plugins.get(plugin)):
            changes.needs_restart.append(f"plugin {plugin}'s settings")
    for key, differs in (
        ("log", (old.log_format, old.log_level) != (new.log_format, new.log_level)),
        ("control", old.control != new.control),
        ("health (pod-wide checks, listen)", _pod_health(old) != _pod_health(new)),
    ):
        if differs:
            changes.needs_restart.append(key)
    return changes


def _compare_processes(old: Config, new: Config, changes: Changes) -> None:
    before = {spec.name: spec for spec in old.processes}
    after = {spec.name: spec for spec in new.processes}
    for name, spec in after.items():
        if spec.main or (name in before and before[name].main):
            keys = _differences(before[name], spec, main=True) if name in before else ["added"]
            if keys:
                changes.needs_restart.append(f"main process {name} ({', '.join(keys)})")
            continue
        if name not in before:
            changes.added.append(name)
        elif keys := _differences(before[name], spec):
            changes.changed[name] = keys
        else:
            changes.unchanged.append(name)
        if name in before and _check_differences(old, new, name):
            changes.needs_restart.append(f"health checks of {name}")
    for name, spec in before.items():
        if name not in after:
            if spec.main:
                changes.needs_restart.append(f"main process {name} (removed)")
            else:
                changes.removed.append(name)


def _differences(old: ProcessSpec, new: ProcessSpec, *, main: bool = False) -> list[str]:
    """The settings of a process that differ, by their YAML names."""
    ignored = {"position"}
    if main:
        # The command after -- depends on every process of the file: that
        # follows from the file, it is not a change of the main process.
        ignored |= {"depends_on"}
    return [
        name
        for name in ProcessSpec.__dataclass_fields__
        if name not in ignored and getattr(old, name) != getattr(new, name)
    ]


def _without_positions(checks: tuple[object, ...]) -> list[object]:
    return [replace(check, position=None) for check in checks]  # type: ignore[type-var]


def _check_differences(old: Config, new: Config, name: str) -> bool:
    before = _without_positions(tuple(c for c in old.health.checks if c.process == name))
    after = _without_positions(tuple(c for c in new.health.checks if c.process == name))
    return before != after


def _pod_health(config: Config) -> tuple[object, ...]:
    return (config.health.listen, *_without_positions(tuple(c for c in config.health.checks if c.process is None)))


class Replanner:
    """Replans, one at a time, on behalf of the control socket."""

    def __init__(
        self,
        pod: Replannable,
        *,
        nursery: Callable[[], trio.Nursery | None],
        locks: MutableMapping[str, trio.Lock],
        shutting_down: Callable[[], bool],
    ) -> None:
        self.pod = pod
        self._nursery = nursery
        self._shutting_down = shutting_down
        self._locks = locks  # the control operations' per-process locks
        self._lock = trio.Lock()

    async def replan(self, *, dry_run: bool) -> dict[str, object]:
        """The answer to a ``replan`` request."""
        async with self._lock:
            try:
                new = await trio.to_thread.run_sync(self.pod.reload_config)
            except ConfigError as exc:
                problems = [str(problem) for problem in exc.problems]
                return {
                    "ok": False,
                    "error": f"the configuration has {len(problems)} problem(s); nothing was changed",
                    "problems": problems,
                }
            changes = compare(self.pod.config, new)
            if dry_run or changes.empty:
                return {"ok": True, "applied": False, "changes": changes.lines(), "messages": []}
            log.info("replan: %s", "; ".join(changes.lines()))
            messages = await self._apply(new, changes)
            return {"ok": True, "applied": True, "changes": changes.lines(), "messages": messages}

    async def _apply(self, new: Config, changes: Changes) -> list[str]:
        old = self.pod.config
        going = {*changes.removed, *changes.changed}
        messages: list[str] = []
        for level in stop_levels(old):
            async with trio.open_nursery() as nursery:
                for spec in level:
                    if spec.name in going:
                        nursery.start_soon(self._stop, spec.name, old, messages)
        processes = self.pod.processes
        for name in changes.removed:
            del processes[name]
            self._locks.pop(name, None)
        for spec in new.processes:
            if spec.name in changes.changed or spec.name in changes.added:
                processes[spec.name] = self.pod.new_process(spec)
                self._locks.setdefault(spec.name, trio.Lock())
        adopted = self._keep_main(old, new)
        # In the file's order, as `supervisor status` lists them.
        ordered = {spec.name: processes[spec.name] for spec in adopted.processes}
        processes.clear()
        processes.update(ordered)
        self.pod.adopt(adopted)
        coming = {*changes.added, *changes.changed}
        for level in start_levels(new):
            starting = [processes[spec.name] for spec in level if spec.name in coming]
            if starting and self._shutting_down():
                # The shutdown plan stops what runs; nothing new may start.
                messages += [f"{p.name} not started: the supervisor is shutting down" for p in starting]
                continue
            messages += await self._start_level(starting)
        return messages

    @staticmethod
    def _keep_main(old: Config, new: Config) -> Config:
        """``new`` with the running main process's spec: it is not replaced."""
        main = old.main
        if main is None:
            return replace(new, processes=tuple(spec for spec in new.processes if not spec.main))
        # (A new process under the running main's name is not started: the
        # main process keeps its name until the container restarts.)
        kept = [main if spec.main else spec for spec in new.processes if spec.main or spec.name != main.name]
        if main not in kept:
            kept.append(main)  # gone from the file, still running
        return replace(new, processes=tuple(kept))

    async def _stop(self, name: str, old: Config, messages: list[str]) -> None:
        process = self.pod.processes[name]
        async with self._locks[name]:
            if process.state.final:
                messages.append(f"{name} was {process.state.value}")
                return
            spec = process.spec
            budget = spec.stop_timeout if spec.stop_timeout is not None else old.grace_period
            status = await process.stop(Deadline(budget, reserve=0.0))
            messages.append(f"{name} stopped" + (f" ({status})" if status is not None else ""))

    async def _start_level(self, level: list[SupervisedProcess]) -> list[str]:
        nursery = self._nursery()
        assert nursery is not None, "a replan before the supervised nursery exists"
        messages: list[str] = []
        for process in level:
            with trio.CancelScope(shield=True):
                await nursery.start(process.supervise)

        async def ready(process: SupervisedProcess) -> None:
            reason = await process.wait_ready()
            messages.append(
                f"{process.name} started (pid {process.pid})"
                if reason is None
                else f"{process.name} did not start: {reason}"
            )

        async with trio.open_nursery() as waits:
            for process in level:
                waits.start_soon(ready, process)
        return messages
