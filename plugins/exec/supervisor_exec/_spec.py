"""The exec plugin's settings: a list of commands, each bound to a phase."""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from supervisor import PHASES, PROCESS_PHASES, Config, Settings, plan_entries, read_entries, read_phase

__all__ = ["PHASES", "PROCESS_PHASES", "Command", "ExecSettings", "parse"]


_KEYS = ("phase", "process", "command", "name", "timeout", "kill_after", "env", "cwd")
# After its timeout a command gets SIGTERM, then SIGKILL this much later:
# long enough for a shell script's trap to clean up, short against a grace period.
_DEFAULT_KILL_AFTER = 2.0
_NAME_WIDTH = 40


@dataclass(frozen=True, slots=True)
class Command:
    """One command to run; ``timeout`` None means "as long as the phase allows"."""

    phase: str
    argv: tuple[str, ...]
    name: str
    process: str | None = None
    timeout: float | None = None
    kill_after: float = _DEFAULT_KILL_AFTER
    env: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    cwd: str | None = None


@dataclass(frozen=True, slots=True)
class ExecSettings:
    commands: tuple[Command, ...]

    def plan(self) -> dict[str, str]:
        """Where ``supervisor check`` shows this plugin: the phases with commands."""
        return plan_entries(self.commands)


def parse(settings: Settings, config: Config) -> ExecSettings:
    """Read ``plugins.exec``; every problem is recorded on ``settings``."""
    return ExecSettings(read_entries(settings, config, "commands", "a list of commands to run", _parse_command))


def _parse_command(entry: Settings, config: Config) -> Command | None:
    entry.check_keys(_KEYS)
    phase, process = read_phase(entry, config, noun="commands")
    argv = entry.command("command", required=True)
    timeout = entry.duration("timeout")
    kill_after = entry.duration("kill_after", _DEFAULT_KILL_AFTER)
    env = entry.mapping("env")
    cwd = entry.string("cwd")
    name = entry.string("name")
    if phase is None or not argv:
        return None
    return Command(
        phase=phase,
        argv=argv,
        name=name or _short(shlex.join(argv)),
        process=process,
        timeout=timeout,
        kill_after=kill_after,
        env=MappingProxyType(dict(env)),
        cwd=cwd,
    )


def _short(text: str) -> str:
    return text if len(text) <= _NAME_WIDTH else text[: _NAME_WIDTH - 3] + "..."
