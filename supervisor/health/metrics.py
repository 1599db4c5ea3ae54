"""/metrics in the Prometheus text exposition format (version 0.0.4).

Written by hand rather than with ``prometheus_client``: that library pulls
in ``http.server``, ``wsgiref`` and the email package — about 14 MiB of
resident memory and 55-75 ms of import on this project's 2-core machines,
against a 30 MiB budget for the whole idle supervisor.  The format is a few
lines of text per metric; what is needed here is only gauges and counters
with labels.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

from ..runtime.state import ProcessState

if TYPE_CHECKING:
    from .._timeline import Timeline
    from ..runtime import SupervisedProcess
    from .board import Board, Level, Verdict

__all__ = ["CONTENT_TYPE", "PodView", "render_metrics"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class PodView(Protocol):
    """What the probe listener and /metrics read of the running pod: the
    control socket's operations (``supervisor.control.operations``) are one,
    named here so that health imports nothing of the control layer above it."""

    @property
    def processes(self) -> Mapping[str, SupervisedProcess]: ...
    @property
    def board(self) -> Board: ...
    @property
    def started(self) -> float:
        """When the supervisor started (``time.monotonic()``)."""

    def health(self, level: Level) -> Verdict: ...
    def shutdown(self) -> object | None:
        """Something (its description) while the pod shuts down, else None."""

    def timeline(self) -> Timeline | None: ...


def render_metrics(ops: PodView) -> str:
    processes = list(ops.processes.values())
    lines: list[str] = []

    def family(
        name: str, kind: str, help_text: str, samples: Iterable[tuple[Sequence[tuple[str, str]], float]]
    ) -> None:
        lines.append(f"# HELP {name} {help_text}")
        lines.append(f"# TYPE {name} {kind}")
        for labels, value in samples:
            lines.append(f"{name}{_labels(labels)} {_number(value)}")

    family(
        "supervisor_process_up",
        "gauge",
        "1 while the process runs and is ready, else 0.",
        [((("process", p.name),), float(p.state is ProcessState.RUNNING)) for p in processes],
    )
    family(
        "supervisor_process_state",
        "gauge",
        "1 for the state the process is in.",
        [((("process", p.name), ("state", p.state.value)), 1.0) for p in processes],
    )
    family(
        "supervisor_process_restarts_total",
        "counter",
        "Restarts by the restart policy since the supervisor started.",
        [((("process", p.name),), float(p.restarts)) for p in processes],
    )
    family(
        "supervisor_process_last_exit_code",
        "gauge",
        "Exit status of the last run that ended (128+N: killed by signal N).",
        [((("process", p.name),), float(p.status.exit_code)) for p in processes if p.status is not None],
    )
    family(
        "supervisor_health_check_up",
        "gauge",
        "1 when the check passes, 0 when it is down or not passed yet.",
        [((("check", c.name), ("level", c.level)), float(c.up is True)) for c in ops.board.checks.values()],
    )
    alive = ops.health("alive").ok
    ready = ops.health("ready").ok
    family("supervisor_alive", "gauge", "What /livez answers (1: 200).", [((), float(alive))])
    family("supervisor_ready", "gauge", "What /readyz answers (1: 200).", [((), float(ready))])
    shutdown = ops.shutdown()
    family(
        "supervisor_shutdown_in_progress",
        "gauge",
        "1 once the shutdown has begun.",
        [((), float(shutdown is not None))],
    )
    family(
        "supervisor_start_time_seconds",
        "gauge",
        "When the supervisor started, in seconds since the epoch.",
        [((), time.time() - (time.monotonic() - ops.started))],
    )
    timeline = ops.timeline()
    if shutdown is not None and timeline is not None:
        spans: dict[str, tuple[float, float]] = {}
        for step in timeline.steps:
            first, last = spans.get(step.phase, (step.start, step.start))
            spans[step.phase] = (min(first, step.start), max(last, step.start + step.duration))
        family(
            "supervisor_shutdown_phase_seconds",
            "gauge",
            "How long each phase of the shutdown under way has taken so far (first step's start to last step's end).",
            [((("phase", phase),), last - first) for phase, (first, last) in spans.items()],
        )
    return "\n".join(lines) + "\n"


def _labels(labels: Sequence[tuple[str, str]]) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{key}="{_escape(value)}"' for key, value in labels) + "}"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(value: float) -> str:
    return str(int(value)) if value == int(value) else repr(value)
