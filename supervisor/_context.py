"""What a plugin sees: its own view of the running supervisor."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal, Protocol

import trio

from ._status import ExitStatus
from ._timeline import Timeline
from .config import Config, ProcessSpec
from .runtime.state import ProcessState

__all__ = ["Context", "ProcessInfo", "Reports"]

Level = Literal["alive", "ready"]


class ProcessInfo(Protocol):
    """A supervised process, read-only."""

    @property
    def name(self) -> str: ...

    @property
    def spec(self) -> ProcessSpec: ...

    @property
    def pid(self) -> int | None:
        """The current PID, None while not running."""

    @property
    def running(self) -> bool: ...

    @property
    def state(self) -> ProcessState:
        """Where the process is in its lifecycle (``supervisor.ProcessState``)."""

    @property
    def status(self) -> ExitStatus | None:
        """How the last run ended, None if it has not ended."""

    @property
    def restarts(self) -> int: ...


class Reports(Protocol):
    """Where a plugin's status line and health checks go: the health board
    (``supervisor.health.board.Board``).  Named here by what a Context needs
    of it rather than imported, so that the board, which shows processes,
    and the plugins' view, which reports to it, do not depend on each other."""

    def report(self, source: str, name: str, *, ok: bool, level: Level, detail: str = "") -> None: ...

    def set_status(self, source: str, text: str | None) -> None: ...


@dataclass
class Context:
    """One plugin's view, passed to its hooks as ``ctx``.

    ``settings`` is what the plugin's ``supervisor_configure`` returned.
    ``processes`` maps names to live views, in start order.
    """

    plugin: str
    settings: object
    config: Config
    log: logging.Logger
    processes: Mapping[str, ProcessInfo]
    timeline: Timeline
    main_exited: trio.Event
    """Set once the main process has exited for good."""
    board: Reports | None = None
    """Where ``report_health`` and ``set_status`` go (None: nowhere, as in
    unit tests that build a Context by hand)."""

    def set_status(self, text: str | None) -> None:
        """This plugin's line in ``supervisor status`` ("3 guests running",
        "draining: 2 of 5 endpoints left"); None or "" removes it.  One line:
        newlines are folded into spaces.  Cheap: call it whenever it changes."""
        if self.board is not None:
            self.board.set_status(self.plugin, text)

    def report_health(self, name: str, *, ok: bool, level: Level = "ready", detail: str = "") -> None:
        """Contribute a health check: its latest verdict, which counts at once
        (apply any threshold of your own before reporting a failure).

        ``name`` is shown as ``PLUGIN.NAME``; ``level="ready"`` makes /readyz
        and ``supervisor health`` fail while it is down, ``level="alive"``
        /livez (the kubelet then restarts the container: use it only for a
        state the supervisor cannot recover from).  ``detail`` says why, in
        a few words.  Call it again whenever the verdict changes."""
        if self.board is not None:
            self.board.report(self.plugin, f"{self.plugin}.{name}", ok=ok, level=level, detail=detail)
