"""A run's readiness verdict: ready, or why it never became ready.

Each run gets a fresh gate.  The first verdict counts and later ones are
ignored: a run that exited after its check passed was ready, and a check
that passes after the run exited does not make it so.  Dependents (the next
start level, ``supervisor start``) wait on the gate; the verdict "ready" is
what moves a process from STARTING to RUNNING, so RUNNING always means
ready.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable

import trio

from .._units import format_duration
from ..config import ProcessSpec
from .readiness import ReadyProbe, describe

__all__ = ["ReadyGate", "probe_readiness"]

log = logging.getLogger("supervisor.process")


class ReadyGate:
    def __init__(self, on_ready: Callable[[], None] = lambda: None) -> None:
        self._on_ready = on_ready
        self._settled = trio.Event()
        self._not_ready: str | None = None

    def settle(self, not_ready: str | None) -> None:
        """Record the verdict: None for ready, else why not.  Only the first
        one counts."""
        if self._settled.is_set():
            return
        self._not_ready = not_ready
        self._settled.set()
        if not_ready is None:
            self._on_ready()

    async def wait(self) -> str | None:
        """Wait for the verdict: None when ready, else why it never became
        ready (it exited first, or its check did not pass within its
        timeout)."""
        await self._settled.wait()
        return self._not_ready


async def probe_readiness(spec: ProcessSpec, gate: ReadyGate, alive: Callable[[], bool]) -> None:
    """Probe ``spec.ready`` beside a run, and settle ``gate`` with what came
    of it: ready once the check passes (if the run is still ``alive``), or
    not ready once the check's timeout is over.  The caller cancels it when
    the run ends first."""
    check = spec.ready
    assert check is not None, "probe_readiness() for a process without a ready check"
    probe = ReadyProbe(check, env={**os.environ, **spec.env}, cwd=spec.cwd)
    with trio.move_on_after(check.timeout):
        await probe.wait()
        if alive():
            log.info("%s is ready (%s)", spec.name, describe(check))
            gate.settle(None)
        return
    why = f"; last probe: {probe.last_failure}" if probe.last_failure else ""
    gate.settle(f"not ready within {format_duration(check.timeout)} ({describe(check)}{why})")
