"""Building what the plugin host would hand a plugin, by hand: settings read
from a real YAML file (so problems carry FILE:LINE:COLUMN), a Context, a
Deadline and a Timeline."""

from __future__ import annotations

import http.server
import inspect
import logging
import ssl
import textwrap
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import trio

from supervisor import PHASES, Config, Context, Deadline, ExitStatus, ProcessSpec, ProcessState, Timeline, hookspec
from supervisor.config import ConfigError, load_config

__all__ = [
    "FakeProcess",
    "LogRecords",
    "QuietHandler",
    "call_every_phase",
    "configure",
    "configure_problems",
    "make_context",
    "serve_http",
]


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


async def call_every_phase(plugin: object, ctx: Context, *, process: FakeProcess, status: ExitStatus | None) -> None:
    """Call the plugin's hook of every phase in ``PHASES`` order, as pluggy
    does: with those of the arguments its hook specification offers that the
    implementation names."""
    available = {"ctx": ctx, "deadline": Deadline(30), "process": process, "status": status, "reason": "test"}
    for phase in PHASES:
        name = f"supervisor_{phase}"
        offered = inspect.signature(getattr(hookspec, name)).parameters
        hook = getattr(plugin, name)
        await hook(**{arg: available[arg] for arg in inspect.signature(hook).parameters if arg in offered})


class QuietHandler(http.server.BaseHTTPRequestHandler):
    """A request handler that keeps the test output clean."""

    def log_message(self, format: str, *args: object) -> None:
        pass


@contextmanager
def serve_http(
    handler: type[http.server.BaseHTTPRequestHandler], *, tls: ssl.SSLContext | None = None
) -> Iterator[int]:
    """An HTTP(S) server on 127.0.0.1, one thread per request; yields its
    port.  Handler threads are joined at the end, so that an answer still
    being written ends with its test."""
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.daemon_threads = False
    if tls is not None:
        httpd.socket = tls.wrap_socket(httpd.socket, server_side=True)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield int(httpd.server_address[1])
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)


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
