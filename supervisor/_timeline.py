"""The shutdown timeline: where the grace period went, as a list of records.

Filled by the plan (and by plugins for their own sub-steps, such as one VM's
shutdown) and rendered once, at the end, as text or JSON, so that
``kubectl logs`` answers "what took so long" without a debugger.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import trio

from ._deadline import trio_now

__all__ = ["Outcome", "Step", "Timeline"]

Outcome = str
"""One of ``ok``, ``timeout``, ``error``, ``failed`` (a ``HookFailed``),
``cancelled``, ``skipped`` or a step-specific word (``killed``,
``destroyed``, ``saved``...)."""


@dataclass
class Step:
    """One record: what ran, in which phase, when (offset from the start of
    the shutdown), for how long, and how it ended.  ``phase``: a `Phase`
    for the plan's and the host's steps; a plugin's own steps may give the
    phase's plain name (``"pre_stop"``), which equals it."""

    phase: str
    name: str
    start: float
    duration: float = 0.0
    outcome: Outcome = "ok"
    detail: str = ""
    plugin: str | None = None

    def describe(self) -> str:
        """``phase plugin: name``, on one line."""
        who = f"{self.plugin}: " if self.plugin else ""
        return f"{self.phase} {who}{self.name}"

    def as_dict(self) -> dict[str, object]:
        record: dict[str, object] = {
            "phase": self.phase,
            "name": self.name,
            "start": round(self.start, 4),
            "duration": round(self.duration, 4),
            "outcome": self.outcome,
        }
        if self.plugin:
            record["plugin"] = self.plugin
        if self.detail:
            record["detail"] = self.detail
        return record


@dataclass
class Timeline:
    origin: float = field(default_factory=trio.current_time)
    steps: list[Step] = field(default_factory=list)
    # Hears the step in progress whenever it changes -- a step starts, or
    # one ends and the latest one still running is current again -- and
    # whether it is still running (False: it ended and none other runs):
    # the orchestrator tells the init layer, whose log line at the wall
    # names the step the shutdown had reached, never one already over.
    on_step: Callable[[Step, bool], None] | None = None
    _running: list[Step] = field(default_factory=list, repr=False)

    @contextmanager
    def step(self, phase: str, name: str, *, plugin: str | None = None) -> Iterator[Step]:
        """Record the block as one step.  Set ``step.outcome`` inside the block
        for anything other than ``ok``; a cancellation is recorded as
        ``cancelled`` (or ``timeout`` if the block set it) and an exception as
        ``error``, and both propagate unchanged."""
        # trio_now: also from a plain def hook's worker thread.
        record = Step(phase=phase, name=name, start=trio_now() - self.origin, plugin=plugin)
        self.steps.append(record)
        self._running.append(record)
        if self.on_step is not None:
            self.on_step(record, True)
        try:
            yield record
        except BaseException as exc:
            if _is_cancellation(exc):
                if record.outcome == "ok":
                    record.outcome = "cancelled"
            else:
                record.outcome = "error"
                record.detail = record.detail or f"{type(exc).__name__}: {exc}"
            raise
        finally:
            record.duration = trio_now() - self.origin - record.start
            self._ended(record)

    def _ended(self, record: Step) -> None:
        latest = self._running[-1] is record
        self._running.remove(record)
        if self.on_step is None or not latest:
            return  # a step that started later is still the current one
        if self._running:
            self.on_step(self._running[-1], True)
        else:
            self.on_step(record, False)

    def discard(self, step: Step) -> None:
        """Forget a step that turned out to be nothing worth showing."""
        self.steps.remove(step)

    def render(self) -> list[str]:
        """Aligned text lines, one per step, in the order the steps started."""
        if not self.steps:
            return []
        width = max(len(_label(s)) for s in self.steps)
        lines = []
        for s in sorted(self.steps, key=lambda s: s.start):
            line = f"+{s.start:7.3f}s {s.duration:7.3f}s  {_label(s):<{width}}  {s.outcome}"
            if s.detail:
                line += f" ({s.detail})"
            lines.append(line)
        return lines

    def as_json(self) -> list[dict[str, object]]:
        return [s.as_dict() for s in sorted(self.steps, key=lambda s: s.start)]


def _is_cancellation(exc: BaseException) -> bool:
    """trio.Cancelled, also when a nursery inside the step wrapped it in an
    exception group."""
    if isinstance(exc, BaseExceptionGroup):
        return all(_is_cancellation(inner) for inner in exc.exceptions)
    return isinstance(exc, trio.Cancelled)


def _label(step: Step) -> str:
    who = f"{step.plugin}: " if step.plugin else ""
    return f"{step.phase:<19} {who}{step.name}"
