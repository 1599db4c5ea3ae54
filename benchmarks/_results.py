"""What a scenario produces: rows of figures, each judged against its target.

A row is one measure of one scenario (start-up median, signal p99...): the
supervisor's figure, the anchors' figures from the same run, the ratio to the
best anchor and to the Python floor, the target and the verdict.  A target
may be a multiple of the Python floor's figure in the same row: the limit
then moves with the machine and the run, as the floor does.  A figure that was measured but came
with a wrong outcome (a process left running, a wrong exit code) fails even
when it is fast.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["FLOOR", "Figure", "Row", "Target", "percentile", "summary"]

# The name of the Python-floor baseline among a row's anchors (benchmarks/floor_init.py).
FLOOR = "Python floor"


@dataclass
class Figure:
    """One init's number for one measure; ``value`` None means not measured
    (``note`` says why).  ``problems`` are failed correctness checks."""

    value: float | None = None
    note: str = ""
    problems: list[str] = field(default_factory=list)

    @property
    def correct(self) -> bool:
        return not self.problems

    def as_json(self) -> dict[str, Any]:
        return {"value": self.value, "note": self.note, "correct": self.correct, "problems": self.problems}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Figure:
        return cls(data.get("value"), data.get("note", ""), list(data.get("problems", [])))


@dataclass(frozen=True)
class Target:
    """``value <= limit`` or, with ``tolerance``, ``|value - limit| <= tolerance``;
    with ``of_floor``, ``value <= of_floor * floor``, floor being the Python floor's figure (the
    row supplies that figure as ``floor``)."""

    text: str
    limit: float | None
    tolerance: float | None = None
    of_floor: float | None = None

    @classmethod
    def floor_multiple(cls, factor: float) -> Target:
        return cls(f"≤ {factor:g} × Python floor", None, of_floor=factor)

    def met(self, value: float, floor: float | None = None) -> bool:
        limit = self.limit_for(floor)
        if limit is None:
            return True
        if self.tolerance is not None:
            return abs(value - limit) <= self.tolerance
        return value <= limit

    def limit_for(self, floor: float | None) -> float | None:
        if self.of_floor is None:
            return self.limit
        if floor is None:
            raise ValueError("a target relative to the Python floor needs the floor's figure")
        return self.of_floor * floor

    def as_json(self) -> dict[str, Any]:
        return {"text": self.text, "limit": self.limit, "tolerance": self.tolerance, "of_floor": self.of_floor}


@dataclass
class Row:
    scenario: str
    measure: str
    unit: str
    target: Target
    ours: Figure
    # The anchors by name; names other than the anchor inits are other
    # baselines (the lease hand-over without the plugin, say).
    anchors: dict[str, Figure] = field(default_factory=dict)

    @property
    def best_anchor(self) -> tuple[str, float] | None:
        measured = [(f.value, name) for name, f in self.anchors.items() if f.value is not None and f.correct]
        if not measured:
            return None
        value, name = min(measured)
        return name, value

    @property
    def ratio(self) -> float | None:
        best = self.best_anchor
        if self.ours.value is None or best is None:
            return None
        if best[1] == 0:
            return math.inf if self.ours.value > 0 else 1.0
        return self.ours.value / best[1]

    @property
    def floor(self) -> float | None:
        """The Python floor's figure in this row, if it was measured and right."""
        figure = self.anchors.get(FLOOR)
        return figure.value if figure is not None and figure.correct else None

    @property
    def floor_ratio(self) -> float | None:
        if self.ours.value is None or not self.floor:
            return None
        return self.ours.value / self.floor

    @property
    def limit(self) -> float | None:
        """The target's limit in this row (None: no floor to scale, or no limit)."""
        if self.target.of_floor is not None and self.floor is None:
            return None
        return self.target.limit_for(self.floor)

    @property
    def status(self) -> str:
        if not self.ours.correct:
            return "fail"
        if self.ours.value is None or (self.target.of_floor is not None and self.floor is None):
            return "not measured"
        return "pass" if self.target.met(self.ours.value, self.floor) else "fail"

    def as_json(self) -> dict[str, Any]:
        best = self.best_anchor
        return {
            "scenario": self.scenario,
            "measure": self.measure,
            "unit": self.unit,
            "target": {**self.target.as_json(), "limit_in_this_run": self.limit},
            "supervisor": self.ours.as_json(),
            "anchors": {name: figure.as_json() for name, figure in self.anchors.items()},
            "best_anchor": best[0] if best else None,
            "ratio": self.ratio,
            "floor_ratio": self.floor_ratio,
            "status": self.status,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Row:
        """A row as ``as_json`` wrote it (to merge a partial run into a full one)."""
        target = data["target"]
        return cls(
            data["scenario"],
            data["measure"],
            data["unit"],
            Target(target["text"], target["limit"], target["tolerance"], target.get("of_floor")),
            Figure.from_json(data["supervisor"]),
            {name: Figure.from_json(figure) for name, figure in data["anchors"].items()},
        )


def percentile(values: Sequence[float], p: float) -> float:
    """The p-th percentile (0-100), nearest-rank, as latency reports use it."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("no values")
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return ordered[rank - 1]


def summary(values: Sequence[float]) -> dict[str, float]:
    return {
        "n": len(values),
        "min": min(values),
        "p50": statistics.median(values),
        "p99": percentile(values, 99),
        "max": max(values),
    }
