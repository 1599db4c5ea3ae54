"""The plan that ``supervisor check`` prints: start order, shutdown steps, hooks.

Meant to be read at a glance: one line per step, a worst-case time window per
stop step, and the hooks that run in each phase.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence

from .._phase import Phase
from .._redact import redact_url
from .._units import format_duration, signal_name
from ..pid1.exits import ExitCode
from ._model import Config, ControlSettings, ProcessSpec, ReadyCheck
from ._order import start_levels, stop_levels

__all__ = ["describe_ready", "render_plan"]

_LABEL_WIDTH = 26
# The hooks of each stop, around it.
_PER_PROCESS = tuple(phase for phase in Phase if phase.per_process and phase.has_hook)
# Shown in their place in the plan: the phases' hooks, and background hooks
# (which run all along) after the start order.
_PLACED = {*(phase for phase in Phase if phase.has_hook), "background"}
# Not phases of a run: configuration time and the CLI.
_NOT_PHASES = {"configure", "add_commands"}


def render_plan(config: Config, hooks: Mapping[str, Sequence[str]]) -> str:
    """The start and shutdown plan of a valid ``config``, as text.

    ``hooks`` maps a phase (``pre_stop``, ``post_stop``,
    ``before_process_stop:libvirtd``; a per-process phase without a name
    applies to every process) to the plugins implementing it, in call order.
    """
    phases = _normalize(hooks)
    lines = [
        f"Configuration {config.path} is valid." if config.path else "Configuration is valid.",
        "",
    ]
    lines += _start_section(config, phases)
    lines.append("")
    lines += _shutdown_section(config, phases)
    lines += _health_section(config)
    others = sorted(phase for phase in phases if phase.partition(":")[0] not in _PLACED | _NOT_PHASES)
    if others:
        lines += ["", "Event hooks"]
        lines += [_row(phase, ", ".join(phases[phase])) for phase in others]
    return "\n".join(lines) + "\n"


def _normalize(hooks: Mapping[str, Sequence[str]]) -> dict[str, list[str]]:
    phases: dict[str, list[str]] = {}
    for phase, plugins in hooks.items():
        if plugins:
            phases.setdefault(phase.removeprefix("supervisor_"), []).extend(plugins)
    return phases


def _row(label: str, text: str, window: str = "", *, indent: int = 2) -> str:
    """A label column, a text column and, if given, a time-window column."""
    line = f"{' ' * indent}{label:<{_LABEL_WIDTH - indent + 2}} {text}"
    if window:
        line = f"{line:<66} {window}"
    return line.rstrip()


def _start_section(config: Config, phases: dict[str, list[str]]) -> list[str]:
    lines = ["Start order"]
    if Phase.STARTUP in phases:
        lines.append(_row("startup hooks", ", ".join(phases[Phase.STARTUP])))
    if not config.processes:
        lines.append("  (no processes)")
    needed = {dep for process in config.processes for dep in process.depends_on}
    for number, level in enumerate(start_levels(config), start=1):
        for process in level:
            label = f"{number}. {process.name}" + (" (main)" if process.main else "")
            lines.append(_row(label, _start_text(process, needed=process.name in needed)))
    if "background" in phases:
        lines.append(_row("background hooks", ", ".join(phases["background"])))
    return lines


def _start_text(process: ProcessSpec, *, needed: bool) -> str:
    parts = []
    if process.depends_on:
        parts.append("after " + ", ".join(process.depends_on))
    if process.ready:
        parts.append(describe_ready(process.ready))
    elif needed:
        parts.append("ready once started")
    if process.restart != "never":
        backoff = process.backoff
        window = format_duration(backoff.window)
        parts.append(f"restart {process.restart} (at most {backoff.max_restarts} in {window})")
    return "; ".join(parts)


def describe_ready(check: ReadyCheck) -> str:
    """``ready when socket /run/x.sock accepts connections (within 60s)`` and the like.

    The words match what ``supervisor.runtime.readiness`` probes.
    """
    target = check.target
    if check.kind == "after":
        assert isinstance(target, float)
        return f"ready {format_duration(target)} after start"
    if check.kind == "exec":
        assert isinstance(target, tuple)
        what = f"`{shlex.join(target)}` exits 0"
    elif check.kind == "socket":
        what = f"socket {target} accepts connections"
    elif check.kind == "file":
        what = f"file {target} exists"
    elif check.kind == "tcp":
        what = f"{target} accepts connections"
    else:
        assert isinstance(target, str)
        what = f"GET {redact_url(target)} answers 2xx/3xx"
    return f"ready when {what} (within {format_duration(check.timeout)})"


def _shutdown_section(config: Config, phases: dict[str, list[str]]) -> list[str]:
    # Imported here: the Deadline's module imports trio, which loading a
    # configuration does not otherwise need.
    from .. import _deadline
    from ..pid1.state import wall_margin

    grace = config.grace_period
    reserve = _deadline.reserve_for(grace)
    g = format_duration(grace)
    # The orchestrator escalates a margin before the wall, where PID 1 kills.
    margin = wall_margin(grace)
    kill_at = f"{round(grace - margin, 3):g}s"
    lines = [f"Shutdown plan (grace period {g})", _started_by(config)]
    started, pre_stop, wind_down = Phase.SHUTDOWN_STARTED, Phase.PRE_STOP, Phase.WIND_DOWN
    if started in phases:
        lines.append(_row(started, ", ".join(phases[started]), "[0s]"))
    # The stops begin once pre_stop and wind_down (beside it, not cut short
    # by the main process's exit) are both over: their windows count from there.
    before = " and ".join(phase for phase in (pre_stop, wind_down) if phase in phases)
    if pre_stop in phases:
        lines.append(_row(pre_stop, ", ".join(phases[pre_stop]), "[from 0s]"))
    if wind_down in phases:
        beside = f", beside {pre_stop}" if pre_stop in phases else ""
        lines.append(_row(wind_down, ", ".join(phases[wind_down]), f"[from 0s{beside}]"))
    offset = 0.0
    levels = stop_levels(config)
    for number, level in enumerate(levels, start=1):
        longest = 0.0
        for process in level:
            window, overrun = _stop_window(process, offset, grace, before, kill_at)
            lines.append(
                _row(
                    f"{number}. {Phase.STOP} {process.name}",
                    _stop_text(process),
                    window + ("  exceeds the grace period" if overrun else ""),
                )
            )
            for phase in _PER_PROCESS:
                plugins = [*phases.get(phase, []), *phases.get(f"{phase}:{process.name}", [])]
                if plugins:
                    lines.append(_row(phase, ", ".join(plugins), indent=5))
            longest = max(longest, process.stop_timeout or 0.0)
        offset += longest
    if not levels:
        lines.append("  (no processes to stop)")
    lines.append(_row(Phase.POST_STOP, ", ".join(phases.get(Phase.POST_STOP, [])) or "-"))
    lines.append(_row("SIGKILL", "to every process still running", f"[{kill_at}]"))
    lines.append(_summary(offset, grace, before))
    lines.append(
        f"  Kill time {kill_at}: SIGKILL to what still runs, {format_duration(margin)} before the grace period ends,"
    )
    lines.append(
        f"  so that PID 1 need not step in (at {g} it kills everything and exits {ExitCode.WALL}). "
        f"Hooks end {format_duration(reserve)} before the kill."
    )
    return lines


def _started_by(config: Config) -> str:
    names = ", ".join(signal_name(s) for s in sorted(config.shutdown_signals))
    return f"  Started by {names} (shutdown_signals); any other signal is forwarded to the main process."


def _stop_window(process: ProcessSpec, offset: float, grace: float, before: str, kill_at: str) -> tuple[str, bool]:
    """A stop's worst-case window, from the shutdown's start or, when
    pre_stop/wind_down come first, from their end; and whether it can be
    seen to run past the grace period."""
    end = None if process.stop_timeout is None else offset + process.stop_timeout
    if before:
        until = kill_at if end is None else f"+{format_duration(end)}"
        return f"[{before} end +{format_duration(offset)} – {until}]", False
    until = kill_at if end is None else format_duration(end)
    return f"[{format_duration(offset)} – {until}]", (offset if end is None else end) > grace


def _stop_text(process: ProcessSpec) -> str:
    how = signal_name(process.stop_signal)
    if process.stop_timeout is None:
        return f"{how}, until the deadline"
    return f"{how}, up to {format_duration(process.stop_timeout)}"


def _summary(claimed: float, grace: float, before: str) -> str:
    if not claimed:
        return "  Stop timeouts claim nothing: each stop may use whatever is left of the grace period."
    left = grace - claimed
    if left < 0:
        return f"  Stop timeouts claim {format_duration(claimed)}, {format_duration(-left)} more than the grace period."
    text = f"  Stop timeouts claim at most {format_duration(claimed)} of {format_duration(grace)}"
    if before:
        verb = "end" if " and " in before else "ends"
        return text + f"; they all fit if {before} {verb} within {format_duration(left)}."
    return text + f"; {format_duration(left)} to spare."


def _health_section(config: Config) -> list[str]:
    """Health checks, the probe listener and the control socket, one line
    each; nothing when all of it is the default (just the socket)."""
    if not config.health.checks and config.health.listen is None and config.control == ControlSettings():
        return []
    lines = ["", "Health and control"]
    for check in config.health.checks:
        what = describe_ready(check.probe).removeprefix("ready when ").rsplit(" (within", 1)[0]
        scope = f"of {check.process}" if check.process else "pod-wide"
        action = {"restart": f"restart {check.process}", "shutdown": "shut down", "ignore": "report only"}
        lines.append(
            _row(
                f"check {check.name}",
                f"{scope}, {check.level}: {what}; every {format_duration(check.period)}, "
                f"timeout {format_duration(check.timeout)}; {check.threshold} failure(s) in a row: "
                f"{action[check.on_failure]}",
            )
        )
    if config.health.listen is not None:
        host, port = config.health.listen
        address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        lines.append(_row("probe listener", f"http://{address}/livez, /readyz, /metrics"))
    control = config.control
    if not control.enabled:
        lines.append(_row("control socket", "off"))
    else:
        where = control.socket or "default ($SUPERVISOR_SOCKET, /run/supervisor/ or /tmp/supervisor-UID/)"
        lines.append(_row("control socket", f"{where}; {control.log_lines} output lines kept per process"))
    return lines
