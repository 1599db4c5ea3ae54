"""The init layer's bookkeeping of the wall, without processes: what the
command line and the orchestrator's messages make of it."""

from __future__ import annotations

import signal
import time

import pytest

from supervisor.config import Config
from supervisor.pid1.options import parse_run_args
from supervisor.pid1.orchestrated import OrchestratorInit
from supervisor.pid1.protocol import (
    SECOND_SIGNAL_SLICE,
    Grace,
    Log,
    MainPid,
    Phase,
    Reached,
    ShutdownSignals,
    Wall,
    decode,
    encode,
)
from supervisor.pid1.state import ShutdownState, wall_margin


def layer(*args: str) -> OrchestratorInit:
    return OrchestratorInit(parse_run_args([*args, "--", "true"]))


def report(init: OrchestratorInit, line: str) -> None:
    message = decode(line.encode())
    if message is not None:
        init._on_message(message)


def test_the_default_grace_period_is_the_configurations() -> None:
    assert layer().grace == Config().grace_period


def test_no_wall_until_a_shutdown_begins() -> None:
    init = layer()
    report(init, "grace 3.000000")
    report(init, "phase stop app")
    assert init.wall is None
    assert init.shutdown.state is ShutdownState.RUNNING


def test_the_first_stop_signal_starts_the_wall_with_the_command_lines_grace_period() -> None:
    init = layer("--grace-period", "4s")
    before = time.monotonic()
    assert init._note_stop(signal.SIGTERM)
    assert init.shutdown.state is ShutdownState.STOPPING
    assert init.wall is not None and before + 4 <= init.wall <= time.monotonic() + 4
    # The configuration's grace period, reported later, counts from the same arrival.
    report(init, "grace 10.000000")
    assert init.stop_signal_at is not None
    assert init.wall == pytest.approx(init.stop_signal_at + 10)


def test_the_orchestrators_wall_and_every_move_of_it_count_earliest_first() -> None:
    init = layer()
    now = time.monotonic()
    report(init, f"wall {now + 20:.6f}")
    assert init.wall == pytest.approx(now + 20)
    assert init.shutdown.state is ShutdownState.STOPPING
    report(init, f"wall {now + 5:.6f}")  # shorten()
    assert init.wall == pytest.approx(now + 5)
    report(init, f"wall {now + 9:.6f}")  # never later again
    assert init.wall == pytest.approx(now + 5)


def test_a_second_stop_signal_leaves_a_fixed_slice() -> None:
    init = layer("--grace-period", "60s")
    init._note_stop(signal.SIGTERM)
    now = time.monotonic()
    init._note_stop(signal.SIGINT)
    assert init.shutdown.state is ShutdownState.HURRYING
    assert init.wall is not None
    assert now + SECOND_SIGNAL_SLICE - 0.1 < init.wall <= time.monotonic() + SECOND_SIGNAL_SLICE


def test_dropped_stop_signals_and_bad_reports_change_nothing() -> None:
    init = layer("--rewrite", "INT:0", "--rewrite=TERM:QUIT")
    assert not init._note_stop(signal.SIGINT)
    for junk in ("wall soon", "grace", "nonsense", "", "main-pid x", "shutdown-signals TERM"):
        report(init, junk)
    assert init.wall is None
    assert init.shutdown.state is ShutdownState.RUNNING


def test_the_orchestrators_states_are_followed_where_the_table_allows() -> None:
    init = layer()
    report(init, "reached HURRYING")  # RUNNING → HURRYING is no move of the table
    assert init.shutdown.state is ShutdownState.RUNNING
    report(init, "reached STOPPING")
    report(init, "reached AT_WALL")  # PID 1's own to decide
    assert init.shutdown.state is ShutdownState.STOPPING
    report(init, "reached HURRYING")
    assert init.shutdown.state is ShutdownState.HURRYING
    report(init, "reached NOWHERE")
    assert init.shutdown.state is ShutdownState.HURRYING


def test_every_message_survives_the_pipe() -> None:
    messages = [
        Log("json", "debug"),
        Grace(2.5),
        ShutdownSignals(frozenset({signal.SIGQUIT, signal.SIGTERM})),
        Wall(123.25),
        Phase("pre_stop exec: drain"),
        Reached(ShutdownState.HURRYING),
        MainPid(42),
    ]
    for message in messages:
        line = encode(message)
        assert line.endswith(b"\n") and line.count(b"\n") == 1
        assert decode(line[:-1]) == message
    assert decode(encode(Phase("two\nlines"))[:-1]) == Phase("two lines")


def test_the_configured_shutdown_signals_replace_term_and_int() -> None:
    init = layer()
    assert init._is_stop_signal(signal.SIGTERM) and not init._is_stop_signal(signal.SIGQUIT)
    report(init, f"shutdown-signals {int(signal.SIGQUIT)}")
    assert init._is_stop_signal(signal.SIGQUIT) and not init._is_stop_signal(signal.SIGTERM)
    assert layer("--shutdown-signals", "QUIT,TERM").shutdown_signals == {signal.SIGQUIT, signal.SIGTERM}


def test_options_after_the_command_are_the_commands() -> None:
    init = OrchestratorInit(parse_run_args(["--", "app", "--grace-period", "1s", "-p", "TERM"]))
    assert init.grace == Config().grace_period
    assert init.options.parent_death_signal is None
    assert parse_run_args(["-pHUP", "--", "app"]).parent_death_signal == signal.SIGHUP


def test_the_margin_is_small_and_bounded() -> None:
    assert wall_margin(2.0) == pytest.approx(0.1)
    assert wall_margin(300.0) == pytest.approx(0.25)
    assert wall_margin(0.0) == 0.0
