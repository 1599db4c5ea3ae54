"""What a plugin sees: its own view of the running supervisor."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

import trio

from ._status import ExitStatus
from ._timeline import Timeline
from .config import Config, ProcessSpec
from .runtime.state import ProcessState

__all__ = ["Context", "ProcessInfo"]


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
