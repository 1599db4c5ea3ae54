"""Durations and signal names: the two value types every layer parses.

Stdlib only, because the init layer and the CLI use it before anything heavy is
imported.
"""

from __future__ import annotations

import signal

__all__ = [
    "FORWARDABLE_SIGNALS",
    "MAX_GRACE_PERIOD",
    "MIN_GRACE_PERIOD",
    "PIPE_RELAY",
    "SHUTDOWN_SIGNALS",
    "check_grace_period",
    "format_duration",
    "parse_duration",
    "parse_grace_period",
    "parse_shutdown_signal",
    "parse_signal",
    "signal_name",
]

# "ms" before "s" and "m": the first unit the text ends with is its unit.
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}

# Signals 1-31 that a PID 1 passes on.  KILL and STOP cannot be caught, CHLD is
# the reaper's own business, and TSTP/TTIN/TTOU are terminal job control: a
# container init that forwards them stops its child behind the user's back
# (tini and catatonit swallow them for the same reason).
_NOT_FORWARDED = {
    signal.SIGKILL,
    signal.SIGSTOP,
    signal.SIGCHLD,
    signal.SIGTSTP,
    signal.SIGTTIN,
    signal.SIGTTOU,
}
FORWARDABLE_SIGNALS: frozenset[int] = frozenset(s for s in range(1, 32) if s not in _NOT_FORWARDED)

# The signals that ask for a shutdown (and, a second time, for the kill) by
# default: the kubelet's SIGTERM and a terminal's Ctrl-C.  An image whose
# STOPSIGNAL is another one (nginx and php-fpm use SIGQUIT) configures its
# own set (--shutdown-signals, shutdown_signals:); PID 1 and the
# orchestrator then both act on that set.
SHUTDOWN_SIGNALS: frozenset[int] = frozenset({signal.SIGTERM, signal.SIGINT})

# The init layer relays a SIGPIPE that somebody sent as this real-time signal:
# the orchestrator must keep SIGPIPE itself ignored, or every write of its own
# (or a plugin's) to a closed pipe would be "forwarded" to the main process.
PIPE_RELAY = int(signal.SIGRTMIN) + 1


def parse_duration(text: str | int | float) -> float:
    """Return seconds for ``30``, ``30s``, ``500ms``, ``1.5s``, ``2m`` or ``1h``.

    Raises ValueError with a message that names the accepted forms.
    """
    # ValueError for every bad input, wrong type included: callers turn it
    # into a user-facing message.
    if isinstance(text, bool):
        raise ValueError(f"expected a duration such as 30s or 500ms, got {text!r}")  # noqa: TRY004
    if isinstance(text, int | float):
        if not 0 <= text < float("inf"):  # NaN too
            raise ValueError(f"a duration must be a finite number >= 0, got {text!r}")
        return float(text)
    # Read by hand, not with a regular expression: PID 1 parses
    # --grace-period, and ``re`` would be a millisecond of its start-up.
    number, seconds = text.strip(), 1.0
    for unit, factor in _UNIT_SECONDS.items():
        if number.endswith(unit):
            number, seconds = number.removesuffix(unit).rstrip(), factor
            break
    whole, dot, fraction = number.partition(".")
    if not (whole.isdecimal() or (not whole and dot and fraction)) or not (fraction.isdecimal() or not fraction):
        raise ValueError(
            f"invalid duration {text!r}: use a number of seconds or a number with "
            "ms, s, m or h (30, 30s, 500ms, 1.5s, 2m)"
        )
    return float(number) * seconds


# The grace period's bounds.  Below a second the shutdown plan has no time to
# run and log even when every process has already exited, so PID 1's wall
# would turn a clean exit into 137 (the kubelet, too, never gives a container
# less than 2 s).  Above a day it is a typo: and a wall beyond what the
# platform's time_t holds would make PID 1's timed wait fail.
MIN_GRACE_PERIOD = 1.0
MAX_GRACE_PERIOD = 86400.0


def check_grace_period(seconds: float) -> float:
    """``seconds`` if it is a usable grace period; ValueError says the bounds."""
    if not MIN_GRACE_PERIOD <= seconds <= MAX_GRACE_PERIOD:
        raise ValueError(
            f"grace period {format_duration(seconds)} is out of range: use 1s to 24h "
            "(PID 1 kills everything when it is over)"
        )
    return seconds


def parse_grace_period(text: str | int | float) -> float:
    """``parse_duration`` within the grace period's bounds."""
    return check_grace_period(parse_duration(text))


def format_duration(seconds: float) -> str:
    """The inverse of parse_duration, for messages and plans: 1.5s, 250ms, 2m."""
    if seconds < 1 and seconds != 0:
        return f"{seconds * 1000:.0f}ms"
    if seconds >= 120 and seconds % 60 == 0:
        return f"{seconds / 60:.0f}m"
    return f"{seconds:.3g}s" if seconds < 100 else f"{seconds:.0f}s"


def parse_signal(text: str | int, *, allow_zero: bool = False) -> int:
    """Return the number of ``TERM``, ``SIGTERM``, ``sigterm`` or ``15``.

    ``allow_zero`` admits 0, which --rewrite uses to mean "drop the signal".
    """
    if isinstance(text, bool):
        raise ValueError(f"expected a signal name or number, got {text!r}")  # noqa: TRY004
    raw = str(text).strip()
    if raw.isdigit():
        number = int(raw)
        if number == 0 and allow_zero:
            return 0
        if 1 <= number <= 31:
            return number
        raise ValueError(f"invalid signal number {raw}: use 1-31" + (" or 0" if allow_zero else ""))
    name = raw.upper()
    if not name.startswith("SIG"):
        name = "SIG" + name
    try:
        number = int(signal.Signals[name])
    except KeyError:
        raise ValueError(f"unknown signal {raw!r}: use a name such as TERM or SIGUSR1, or a number") from None
    if not 1 <= number <= 31:
        raise ValueError(f"signal {raw!r} is a real-time signal; only 1-31 are supported")
    return number


def signal_name(number: int) -> str:
    """``SIGTERM`` for 15; the number itself for anything without a name."""
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def parse_shutdown_signal(text: str | int) -> int:
    """``parse_signal`` for a signal that starts the shutdown: one that PID 1
    receives and would otherwise forward."""
    number = parse_signal(text)
    if number not in FORWARDABLE_SIGNALS:
        raise ValueError(f"{signal_name(number)} cannot start the shutdown: PID 1 never acts on it")
    return number
