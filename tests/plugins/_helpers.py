"""Building what the plugin host would hand a plugin, by hand: settings read
from a real YAML file (so problems carry FILE:LINE:COLUMN), a Context, a
Deadline and a Timeline."""

from __future__ import annotations

import logging
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import trio

from supervisor import Config, Context, ExitStatus, ProcessSpec, ProcessState, Timeline
from supervisor.config import ConfigError, load_config

__all__ = ["FakeProcess", "LogRecords", "configure", "configure_problems", "make_context"]


@dataclass
class FakeProcess:
    """A ProcessInfo for hooks that take a ``process``."""

    name: str
    pid: int | None = None
    running: bool = False
    status: ExitStatus | None = None
    restarts: int = 0
    state: ProcessState = ProcessState.PENDING
    spec: ProcessSpec = field(init=False)

    def __post_init__(self) -> None:
        self.spec = ProcessSpec(name=self.name, command=("true",))


def _load(tmp_path: Path, yaml_text: str) -> Config:
    path = tmp_path / "cfg.yaml"
    path.write_text(textwrap.dedent(yaml_text))
    return load_config(str(path), environ={})


def configure(module: object, tmp_path: Path, yaml_text: str, name: str) -> tuple[object, Config]:
    """Run the plugin's (a module or plugin object) supervisor_configure on its section; fail on any problem."""
    config = _load(tmp_path, yaml_text)
    settings = config.plugins[name]
    parsed = module.supervisor_configure(settings=settings, config=config)  # type: ignore[attr-defined]
    if settings.problems:
        raise ConfigError(settings.problems)
    return parsed, config


def configure_problems(module: object, tmp_path: Path, yaml_text: str, name: str) -> list[str]:
    """The problems the plugin's supervisor_configure records, one line each."""
    config = _load(tmp_path, yaml_text)
    settings = config.plugins[name]
    module.supervisor_configure(settings=settings, config=config)  # type: ignore[attr-defined]
    return str(ConfigError(settings.problems)).splitlines() if settings.problems else []


def make_context(plugin: str, settings: object, config: Config | None = None) -> Context:
    """A Context like the host's (call inside trio: the timeline reads its clock)."""
    config = config or Config()
    return Context(
        plugin=plugin,
        settings=settings,
        config=config,
        log=logging.getLogger(f"supervisor.plugin.{plugin}"),
        processes={p.name: FakeProcess(p.name) for p in config.processes},
        timeline=Timeline(),
        main_exited=trio.Event(),
    )


class LogRecords(logging.Handler):
    """Collects a logger's records; independent of how logging is configured."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []
        self._waiters: list[trio.Event] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)
        # Plugins log from their trio tasks, so waking the waiters is safe.
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            waiter.set()

    async def wait_for(self, text: str, *, count: int = 1) -> str:
        """The ``count``-th message containing ``text``, once there is one:
        what a test waits on instead of sleeping until it has probably
        happened."""
        while True:
            found = [message for message in self.messages if text in message]
            if len(found) >= count:
                return found[count - 1]
            waiter = trio.Event()
            self._waiters.append(waiter)
            await waiter.wait()

    @property
    def messages(self) -> list[str]:
        return [r.getMessage() for r in self.records]

    def at(self, level: int) -> list[str]:
        return [r.getMessage() for r in self.records if r.levelno == level]

    @classmethod
    @contextmanager
    def capture(cls, plugin: str) -> Iterator[LogRecords]:
        logger = logging.getLogger(f"supervisor.plugin.{plugin}")
        handler = cls()
        old_level = logger.level
        logger.addHandler(handler)
        logger.setLevel(logging.DEBUG)
        try:
            yield handler
        finally:
            logger.removeHandler(handler)
            logger.setLevel(old_level)
