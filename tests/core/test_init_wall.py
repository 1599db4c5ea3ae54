"""The init layer's bookkeeping of the wall, without processes: what the
command line and the orchestrator's reports make of it."""

from __future__ import annotations

import signal
import time

import pytest

from supervisor import _init
from supervisor._initpipe import SECOND_SIGNAL_SLICE, wall_margin
from supervisor.config import Config


def layer(*args: str) -> _init.InitLayer:
    return _init.InitLayer([*args, "--", "true"])


def test_the_default_grace_period_is_the_configurations() -> None:
    assert layer().grace == Config().grace_period


def test_no_wall_until_a_shutdown_begins() -> None:
    init = layer()
    init._on_report("grace 3.000000")
    init._on_report("phase stop app")
    assert init.wall is None


def test_the_first_stop_signal_starts_the_wall_with_the_command_lines_grace_period() -> None:
    init = layer("--grace-period", "4s")
    before = time.monotonic()
    init._on_stop_signal(signal.SIGTERM)
    assert init.wall is not None and before + 4 <= init.wall <= time.monotonic() + 4
    # The configuration's grace period, reported later, counts from the same arrival.
    init._on_report("grace 10.000000")
    assert init.wall == pytest.approx(init.stop_signal_at + 10)


def test_the_orchestrators_wall_and_every_move_of_it_count_earliest_first() -> None:
    init = layer()
    now = time.monotonic()
    init._on_report(f"wall {now + 20:.6f}")
    assert init.wall == pytest.approx(now + 20)
    init._on_report(f"wall {now + 5:.6f}")  # shorten()
    assert init.wall == pytest.approx(now + 5)
    init._on_report(f"wall {now + 9:.6f}")  # never later again
    assert init.wall == pytest.approx(now + 5)


def test_a_second_stop_signal_leaves_a_fixed_slice() -> None:
    init = layer("--grace-period", "60s")
    init._on_stop_signal(signal.SIGTERM)
    now = time.monotonic()
    init._on_stop_signal(signal.SIGINT)
    assert init.wall is not None
    assert now + SECOND_SIGNAL_SLICE - 0.1 < init.wall <= time.monotonic() + SECOND_SIGNAL_SLICE


def test_dropped_stop_signals_and_bad_reports_change_nothing() -> None:
    init = layer("--rewrite", "INT:0", "--rewrite=TERM:QUIT")
    assert init.options.dropped == {signal.SIGINT}
    for junk in ("wall soon", "grace", "nonsense", ""):
        init._on_report(junk)
    assert init.wall is None


def test_options_after_the_command_are_the_commands() -> None:
    init = _init.InitLayer(["--", "app", "--grace-period", "1s", "-p", "TERM"])
    assert init.grace == Config().grace_period
    assert init.options.parent_death_signal is None
    assert _init.InitLayer(["-pHUP", "--", "app"]).options.parent_death_signal == signal.SIGHUP


def test_the_margin_is_small_and_bounded() -> None:
    assert wall_margin(2.0) == pytest.approx(0.1)
    assert wall_margin(300.0) == pytest.approx(0.25)
    assert wall_margin(0.0) == 0.0
