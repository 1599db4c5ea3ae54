"""The immutable configuration model: what the rest of the supervisor reads.

Everything here is already validated and resolved (durations in seconds,
signals as numbers, ``${VAR}`` expanded), so no other layer parses strings.
Positions travel with the objects so that later checks (a plugin naming an
unknown process, say) can still point at the right line.
"""

from __future__ import annotations

import signal
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Literal

from .._units import SHUTDOWN_SIGNALS
from ._position import Position

if TYPE_CHECKING:
    from ._settings import Settings

__all__ = [
    "Backoff",
    "Capabilities",
    "Config",
    "ControlSettings",
    "HealthCheck",
    "HealthSettings",
    "ProcessSpec",
    "ReadyCheck",
    "RestartPolicy",
]

RestartPolicy = Literal["never", "on-failure", "always"]
ReadyKind = Literal["socket", "tcp", "http", "exec", "file", "after"]
HealthLevel = Literal["alive", "ready"]
HealthAction = Literal["restart", "shutdown", "ignore"]


@dataclass(frozen=True, slots=True)
class ReadyCheck:
    """How to tell that a process is ready for its dependents.

    ``target`` is a path (socket, file), ``host:port`` (tcp), a URL (http),
    an argv tuple (exec) or seconds (after).
    """

    kind: ReadyKind
    target: str | tuple[str, ...] | float
    timeout: float = 60.0  # the process must be ready within this, or start-up fails
    interval: float = 0.1  # between probes


@dataclass(frozen=True, slots=True)
class Backoff:
    """Exponential restart delays with jitter: initial, doubled up to max.

    More than ``max_restarts`` restarts inside ``window`` seconds and the
    process has failed for good.
    """

    initial: float = 1.0
    max: float = 30.0
    max_restarts: int = 5
    window: float = 60.0


@dataclass(frozen=True, slots=True)
class Capabilities:
    """Capability names without the CAP_ prefix, lower case (``net_bind_service``).

    ``drop`` may contain ``all``; ``keep`` means "drop every other one".
    """

    drop: tuple[str, ...] = ()
    keep: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ProcessSpec:
    name: str
    command: tuple[str, ...]
    depends_on: tuple[str, ...] = ()
    main: bool = False
    env: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    cwd: str | None = None
    user: str | None = None  # as written: a name or a number
    group: str | None = None
    # None: as the file does not say.  With `user` (not root) that means
    # no_new_privs on and every capability dropped (supervisor.runtime.privileges).
    no_new_privs: bool | None = None
    capabilities: Capabilities | None = None
    restart: RestartPolicy = "never"
    backoff: Backoff = field(default_factory=Backoff)
    on_failure: Literal["shutdown", "ignore"] = "shutdown"
    stop_signal: int = signal.SIGTERM
    stop_timeout: float | None = None  # None: whatever remains of the budget
    process_group: bool = True
    ready: ReadyCheck | None = None
    log_prefix: bool = False
    # The command after `--`: its stdout and stderr are the supervisor's
    # own, not pipes the supervisor reads (see supervisor/runtime/capture.py).
    inherit_output: bool = False
    position: Position | None = None

    @property
    def changes_privileges(self) -> bool:
        """Whether the process runs with other ids, capabilities or
        no_new_privs than the supervisor's own.  When it does not, nothing
        about privileges needs working out: neither the start nor the
        supervisor's memory pays for ``supervisor.runtime.privileges``."""
        return (
            self.user is not None or self.group is not None or self.capabilities is not None or bool(self.no_new_privs)
        )


@dataclass(frozen=True, slots=True)
class HealthCheck:
    """A check repeated while the pod runs (``health:`` of a process or the top level).

    ``probe`` is a readiness check of kind http, tcp or exec; each probe may
    take ``timeout``; ``threshold`` consecutive failures make the check down
    and trigger ``on_failure``.  ``process`` is the process it belongs to
    (probed only while that process runs), None for a pod-wide check.
    """

    name: str
    probe: ReadyCheck
    period: float = 10.0
    timeout: float = 3.0
    threshold: int = 3
    level: HealthLevel = "alive"
    on_failure: HealthAction = "ignore"
    process: str | None = None
    position: Position | None = None


@dataclass(frozen=True, slots=True)
class HealthSettings:
    """The ``health:`` section: every check (per process ones included) and
    the optional HTTP listener for the kubelet's probes (host, port)."""

    checks: tuple[HealthCheck, ...] = ()
    listen: tuple[str, int] | None = None


@dataclass(frozen=True, slots=True)
class ControlSettings:
    """The ``control:`` section: the local control socket.

    ``socket`` None means the default location (``SUPERVISOR_SOCKET``, else
    the first usable of /run/supervisor/ and /tmp/supervisor-UID/);
    ``enabled`` False turns the socket off.  ``log_lines``: how many recent
    output lines per process ``supervisor logs`` can show.
    """

    enabled: bool = True
    socket: str | None = None
    log_lines: int = 1000


@dataclass(frozen=True, slots=True)
class Config:
    """A whole deployment: the processes, the shutdown budget, plugin settings.

    ``plugins`` maps a plugin's name to its section, not yet validated: each
    plugin reads its own through ``supervisor.Settings``.
    """

    processes: tuple[ProcessSpec, ...] = ()
    grace_period: float = 30.0
    # The signals that start the shutdown (``shutdown_signals:`` or
    # ``--shutdown-signals``); any other is forwarded to the main process.
    shutdown_signals: frozenset[int] = SHUTDOWN_SIGNALS
    log_format: Literal["text", "json"] = "text"
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    plugins: Mapping[str, Settings] = field(default_factory=lambda: MappingProxyType({}))
    control: ControlSettings = field(default_factory=ControlSettings)
    health: HealthSettings = field(default_factory=HealthSettings)
    # The signal policy of the command line: ``--rewrite FROM:TO`` (TO 0
    # drops FROM) and ``-g`` (forward to the main process's whole group).
    rewrite: Mapping[int, int] = field(default_factory=lambda: MappingProxyType({}))
    forward_to_group: bool = False
    # ``-e CODE``: main process exit codes reported as 0 (tini's remapping).
    zero_exit_codes: frozenset[int] = frozenset()
    path: str | None = None
    # Positions of top-level keys, for messages about them (e.g. "plugins").
    positions: Mapping[str, Position] = field(default_factory=lambda: MappingProxyType({}))

    @property
    def main(self) -> ProcessSpec | None:
        return next((p for p in self.processes if p.main), None)
