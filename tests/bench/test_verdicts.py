"""How a row is judged: a fast wrong answer fails, a missing figure is
"not measured", the ratio is to the best correct anchor."""

from __future__ import annotations

from benchmarks._bench import _traceback
from benchmarks._results import Figure, Row, Target, percentile


def row(ours: Figure, **anchors: Figure) -> Row:
    return Row("exit latency", "median", "ms", Target("≤ 20 ms", 20.0), ours, dict(anchors))


def test_a_fast_wrong_answer_fails() -> None:
    assert row(Figure(1.0, problems=["exit status 1, expected 0"])).status == "fail"


def test_within_target_and_correct_passes_and_over_target_fails() -> None:
    assert row(Figure(20.0)).status == "pass"
    assert row(Figure(20.5)).status == "fail"


def test_a_missing_figure_is_not_measured_unless_something_went_wrong() -> None:
    assert row(Figure(note="not measured: no libvirt")).status == "not measured"
    assert row(Figure(problems=["the init never started"])).status == "fail"


def test_ratio_is_to_the_best_correct_anchor() -> None:
    judged = row(
        Figure(10.0),
        tini=Figure(2.0),
        catatonit=Figure(0.5, problems=["zombie left"]),  # wrong answers are no yardstick
        supervisord=Figure(1200.0),
    )
    assert judged.best_anchor == ("tini", 2.0)
    assert judged.ratio == 5.0


def test_tolerance_target() -> None:
    target = Target("2 s ± 50 ms", 2.0, 0.05)
    assert target.met(2.04) and target.met(1.96)
    assert not target.met(2.06) and not target.met(1.9)


def test_percentile_is_nearest_rank() -> None:
    samples = [float(i) for i in range(1, 101)]
    assert percentile(samples, 50) == 50.0
    assert percentile(samples, 99) == 99.0
    assert percentile([3.0], 99) == 3.0


def test_a_traceback_in_the_log_is_found_with_its_exception_line() -> None:
    log = "started\nTraceback (most recent call last):\n  File 'x.py', line 1\n    boom()\nRuntimeError: boom\nexiting"
    assert _traceback(log) == "RuntimeError: boom"
    assert _traceback("started\nexiting with status 0") is None
