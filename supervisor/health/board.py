"""The health board: every check's latest verdict and every plugin's status
line, and the two questions the kubelet asks of them.

Checks from the configuration (``supervisor.health.monitor``) and checks a
plugin reports (``ctx.report_health``) land here the same way, so
``supervisor status``, ``supervisor health``, /livez and /readyz never
disagree.  Trio-free: it only holds state.

Ready: every process started and past its readiness check (one that ended
by itself or was stopped on purpose does not hold readiness back), every
ready-level check up, and no shutdown under way.  Alive: no alive-level
check down and no process failed for good.  A process with ``on_failure:
ignore`` that failed for good counts against neither: the pod is meant to
go on without it, and a kubelet restarting the container for it would undo
that promise.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, Protocol

if TYPE_CHECKING:
    from ..config import ProcessSpec
    from ..runtime.state import ProcessState

__all__ = ["Board", "CheckState", "Verdict"]


class _Process(Protocol):
    """What the verdicts read of a process (``supervisor.ProcessInfo`` has
    it; the plugin-facing view depends on the board, not the other way)."""

    @property
    def name(self) -> str: ...

    @property
    def state(self) -> ProcessState: ...

    @property
    def spec(self) -> ProcessSpec: ...


def _failed_for_good(process: _Process) -> bool:
    """Failed, and the pod is not meant to go on without it."""
    return process.state.value == "failed" and process.spec.on_failure != "ignore"


Level = Literal["alive", "ready"]
_NOT_READY_STATES = {"pending": "not started yet", "starting": "not ready yet", "backoff": "restarting"}


@dataclass
class CheckState:
    """One check as the board knows it."""

    name: str
    level: Level
    process: str | None = None
    source: str = "config"  # "config", or the plugin that reports it
    threshold: int = 1
    up: bool | None = None  # None: not probed yet
    failures: int = 0  # consecutive
    detail: str = ""
    changed: float = field(default_factory=time.monotonic)
    probes: int = 0

    @property
    def down(self) -> bool:
        """Failed ``threshold`` times in a row."""
        return self.up is False

    def as_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "level": self.level,
            "process": self.process,
            "source": self.source,
            "up": self.up,
            "failures": self.failures,
            "threshold": self.threshold,
            "detail": self.detail,
            "since": round(time.monotonic() - self.changed, 3),
        }


@dataclass(frozen=True)
class Verdict:
    ok: bool
    reasons: tuple[str, ...]

    def body(self, level: Level) -> str:
        """The probe answer's text: ``ok`` or one failing thing per line."""
        if self.ok:
            return f"{level}: ok\n"
        return f"{level}: failing\n" + "".join(f"{reason}\n" for reason in self.reasons)


class Board:
    def __init__(self) -> None:
        self.checks: dict[str, CheckState] = {}
        self.status_lines: dict[str, str] = {}

    def add(self, state: CheckState) -> CheckState:
        self.checks[state.name] = state
        return state

    def result(self, name: str, ok: bool, detail: str = "") -> CheckState:
        """Record one probe's outcome; the check turns down after
        ``threshold`` failures in a row and up after one success."""
        state = self.checks[name]
        state.probes += 1
        state.detail = detail
        before = state.up
        if ok:
            state.failures = 0
            state.up = True
        else:
            state.failures += 1
            if state.failures >= state.threshold:
                state.up = False
        if state.up is not before:
            state.changed = time.monotonic()
        return state

    def report(self, source: str, name: str, *, ok: bool, level: Level, detail: str = "") -> None:
        """A plugin's own check: its verdict counts at once (the plugin
        applies its own threshold, if any)."""
        state = self.checks.get(name)
        if state is None or state.source != source:
            state = self.add(CheckState(name=name, level=level, source=source))
        state.level = level
        self.result(name, ok, detail)

    def set_status(self, source: str, text: str | None) -> None:
        if text:
            self.status_lines[source] = " ".join(text.split())
        else:
            self.status_lines.pop(source, None)

    def reset(self, name: str) -> None:
        """Back to "not probed" (the process restarted: a new run)."""
        state = self.checks[name]
        state.failures = 0
        if state.up is not None:
            state.changed = time.monotonic()
        state.up = None

    def for_process(self, process: str) -> list[CheckState]:
        return [state for state in self.checks.values() if state.process == process]

    # -- the two questions -------------------------------------------------------

    def ready(self, processes: Iterable[_Process], shutting_down: str | None) -> Verdict:
        reasons = []
        if shutting_down:
            reasons.append(f"shutting down: {shutting_down}")
        for process in processes:
            state = process.state.value
            if state in _NOT_READY_STATES:
                reasons.append(f"process {process.name}: {_NOT_READY_STATES[state]} ({state})")
            elif _failed_for_good(process):
                reasons.append(f"process {process.name}: failed")
        for check in self.checks.values():
            if check.level == "ready" and check.up is not True:
                reasons.append(f"check {check.name}: {_check_text(check)}")
        return Verdict(not reasons, tuple(reasons))

    def alive(self, processes: Iterable[_Process]) -> Verdict:
        reasons = [f"process {process.name}: failed for good" for process in processes if _failed_for_good(process)]
        for check in self.checks.values():
            if check.level == "alive" and check.down:
                reasons.append(f"check {check.name}: {_check_text(check)}")
        return Verdict(not reasons, tuple(reasons))


def _check_text(check: CheckState) -> str:
    if check.up is None:
        return "not passed yet"
    count = f"failed {check.failures} time(s) in a row" if check.failures > 1 else "failed"
    return f"{count}: {check.detail}" if check.detail else count
