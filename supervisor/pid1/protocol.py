"""The contract between PID 1 and the orchestrator: both ends of the status
pipe, the page they share, and the fixed numbers of the wall.

PID 1 owns the shutdown deadline: it must know the absolute kill time as
soon as a shutdown begins, not when the orchestrator is done — a stalled
orchestrator never gets that far.  So the orchestrator reports on a pipe, one
typed message per line, as things happen (all of them orchestrator → PID 1):

`Log`
    the log settings from the configuration;
`Grace`
    the configured grace period, as soon as the configuration is read (until
    then PID 1 uses the command line's ``--grace-period`` or 30 s);
`ShutdownSignals`
    the signals that start the shutdown, from the configuration (until then
    the command line's ``--shutdown-signals`` or TERM and INT);
`Wall`
    a shutdown began, or its deadline moved (``shorten()``/``expire()``): the
    wall is at this ``time.monotonic()`` value (one clock for both
    processes);
`Phase`
    the shutdown timeline's current step, for the wall's log line;
`Reached`
    the orchestrator's shutdown moved to this `ShutdownState` (HURRYING
    after an ``expire()``, say): PID 1 follows when its own table allows
    the move, and keeps its own state otherwise;
`MainPid`
    the main process runs with this PID (0: it has exited): from then on
    PID 1 forwards the main process's signals to it itself, with the
    command line's ``--rewrite`` and ``--process-group``, so a forwarded
    signal costs PID 1's latency alone.

One fact goes the other way: when PID 1 received the stop signal that
started its wall (`StopSignalTime`), so that both processes count the grace
period from the same moment.

The pipe's read end raises ``STATUS_SIGNAL`` in PID 1 on every write
(``F_SETSIG``), so PID 1, which sleeps in ``sigtimedwait``, hears each line at
once.  Stdlib only, and nothing the Python floor does not import (no
dataclasses, which import ``inspect``, nor ``typing.NamedTuple``): both
processes use it before trio, PID 1 for the life of the pod.
"""

from __future__ import annotations

import mmap
import os
import time

from .init import STATUS_SIGNAL as _STATUS_SIGNAL
from .state import ShutdownState

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = [
    "SECOND_SIGNAL_SLICE",
    "STATUS_SIGNAL",
    "Grace",
    "Log",
    "MainPid",
    "Message",
    "Phase",
    "Reached",
    "ShutdownSignals",
    "StatusPipe",
    "StatusReader",
    "StopSignalTime",
    "Wall",
    "decode",
    "encode",
]

# A write to the status pipe wakes PID 1 with this real-time signal (it is
# defined where PID 1 blocks it).
STATUS_SIGNAL = _STATUS_SIGNAL

# After a second stop signal the orchestrator has this long (or less, if the
# wall is sooner) to escalate and exit on its own; then PID 1 kills
# everything itself.  One second: plenty for a loop that is not stuck to
# SIGKILL its processes and log the timeline; short enough that a user who
# pressed Ctrl-C twice is not kept waiting.
SECOND_SIGNAL_SLICE = 1.0


# -- the messages ----------------------------------------------------------------


class _Message:
    """A value: its fields are its ``__slots__``, in ``match`` order too."""

    __slots__: tuple[str, ...] = ()

    def _fields(self) -> tuple[object, ...]:
        return tuple(getattr(self, name) for name in self.__slots__)

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other._fields() == self._fields()

    def __hash__(self) -> int:
        return hash((type(self), self._fields()))

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={value!r}" for name, value in zip(self.__slots__, self._fields(), strict=True))
        return f"{type(self).__name__}({fields})"


class Log(_Message):
    __slots__ = __match_args__ = ("format", "level")

    def __init__(self, format: str, level: str) -> None:
        self.format = format
        self.level = level


class Grace(_Message):
    __slots__ = __match_args__ = ("seconds",)

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds


class ShutdownSignals(_Message):
    __slots__ = __match_args__ = ("signals",)

    def __init__(self, signals: frozenset[int]) -> None:
        self.signals = signals


class Wall(_Message):
    __slots__ = __match_args__ = ("monotonic",)

    def __init__(self, monotonic: float) -> None:
        self.monotonic = monotonic


class Phase(_Message):
    __slots__ = __match_args__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text


class Reached(_Message):
    __slots__ = __match_args__ = ("state",)

    def __init__(self, state: ShutdownState) -> None:
        self.state = state


class MainPid(_Message):
    __slots__ = __match_args__ = ("pid",)

    def __init__(self, pid: int) -> None:
        self.pid = pid
        """0: the main process has exited (or was never started)."""


Message = Log | Grace | ShutdownSignals | Wall | Phase | Reached | MainPid


def encode(message: Message) -> bytes:
    """One line: a keyword, a space, the value."""
    match message:
        case Log(fmt, level):
            line = f"log {fmt} {level}"
        case Grace(seconds):
            line = f"grace {seconds:.6f}"
        case ShutdownSignals(signals):
            line = "shutdown-signals " + ",".join(str(s) for s in sorted(signals))
        case Wall(monotonic):
            line = f"wall {monotonic:.6f}"
        case Phase(text):
            line = f"phase {text}"
        case Reached(state):
            line = f"reached {state.name}"
        case MainPid(pid):
            line = f"main-pid {pid}"
    return (line.replace("\n", " ") + "\n").encode(errors="replace")


def _log(value: str) -> Log:
    fmt, _, level = value.partition(" ")
    return Log(fmt, level)


def _signals(value: str) -> ShutdownSignals:
    return ShutdownSignals(frozenset(int(s) for s in value.split(",") if s))


def _state(name: str) -> ShutdownState:
    try:
        return ShutdownState[name]
    except KeyError:
        raise ValueError(f"no shutdown state {name!r}") from None


_DECODERS: dict[str, Callable[[str], Message]] = {
    "log": _log,
    "grace": lambda value: Grace(float(value)),
    "shutdown-signals": _signals,
    "wall": lambda value: Wall(float(value)),
    "phase": Phase,
    "reached": lambda value: Reached(_state(value)),
    "main-pid": lambda value: MainPid(int(value)),
}


def decode(line: bytes) -> Message | None:
    """The message of one line (without its newline); None when it is
    garbled: the wall never depends on the orchestrator alone."""
    kind, _, value = line.decode(errors="replace").partition(" ")
    parse = _DECODERS.get(kind)
    try:
        return None if parse is None else parse(value)
    except ValueError:
        return None


# -- the two ends ------------------------------------------------------------------


class StatusPipe:
    """The orchestrator's end, one object for the process.  Writes never
    block (the pipe is non-blocking and PID 1 reads it on every wake-up); a
    lost line only costs PID 1 a detail, never the wall, which it computes
    itself too.  Without a descriptor (no PID 1 of ours: tests, embedders)
    every send does nothing."""

    def __init__(self, fd: int | None) -> None:
        self.fd = fd
        if fd is not None:
            try:
                os.set_blocking(fd, False)
            except OSError:
                pass

    def send(self, message: Message) -> None:
        if self.fd is not None:
            try:
                os.write(self.fd, encode(message))
            except OSError:
                pass

    def grace(self, seconds: float) -> None:
        self.send(Grace(seconds))

    def wall_in(self, seconds: float) -> None:
        """The wall is ``seconds`` from now."""
        self.send(Wall(time.monotonic() + max(0.0, seconds)))

    def phase(self, text: str) -> None:
        self.send(Phase(text))

    def stop_signal_since(self) -> float:
        """How long ago PID 1 received the first stop signal; 0 when it has
        not (or there is no PID 1 of ours: no pipe)."""
        shared = StopSignalTime.shared()
        received = shared.read() if self.fd is not None and shared is not None else None
        return 0.0 if received is None else max(0.0, time.monotonic() - received)


class StatusReader:
    """PID 1's end: whatever has arrived, as messages, garbled lines left out."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._buffer = b""

    def read(self) -> list[Message]:
        while True:
            try:
                data = os.read(self.fd, 65536)
            except OSError:  # BlockingIOError: nothing more for now
                break
            if not data:
                break
            self._buffer += data
        *lines, self._buffer = self._buffer.split(b"\n")
        return [message for message in map(decode, lines) if message is not None]


class StopSignalTime:
    """When PID 1 received the first stop signal, on ``time.monotonic()``:
    written by PID 1 before it passes the signal on, read by the orchestrator
    when the signal reaches it.

    Both count the grace period from that one moment.  Counted from when the
    forwarded signal reached the orchestrator instead, its escalation came
    the forwarding delay later than the wall; on a loaded machine that delay
    (the orchestrator waiting for a core) exceeded the margin, PID 1 killed
    first and the timeline was lost.  A shared anonymous page, mapped before
    the fork, needs neither process to read anything at the time, and
    ``kill()`` orders the write before the orchestrator's read.
    """

    _shared: StopSignalTime | None = None

    def __init__(self) -> None:
        self._page = mmap.mmap(-1, 8)  # MAP_SHARED | MAP_ANONYMOUS: survives fork()

    @classmethod
    def share(cls) -> StopSignalTime:
        """PID 1's, made before it forks the orchestrator, which then finds
        the same page with `shared`."""
        cls._shared = cls()
        return cls._shared

    @classmethod
    def shared(cls) -> StopSignalTime | None:
        return cls._shared

    def record(self, monotonic: float) -> None:
        self._page[:8] = round(monotonic * 1e9).to_bytes(8, "little")

    def read(self) -> float | None:
        nanoseconds = int.from_bytes(self._page[:8], "little")
        return nanoseconds / 1e9 if nanoseconds else None
