"""How a row is judged: a fast wrong answer fails, a missing figure is
"not measured", the ratio is to the best correct anchor."""

from __future__ import annotations

from benchmarks._bench import _traceback
from benchmarks._results import FLOOR, Figure, Row, Target, percentile


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


def test_a_partial_run_replaces_only_its_own_rows_and_is_listed() -> None:
    from benchmarks._cli import merge_into

    def named(scenario: str, value: float) -> Row:
        return Row(scenario, "m", "ms", Target("≤ 20 ms", 20.0), Figure(value), {"tini": Figure(1.0)})

    machine = {"cpus": 2, "cpu": "x", "kernel": "k", "python": "3", "load_average": [1.0]}
    old_meta = {"finished": "then", "smoke": False, "duration": 300.0, "machine": machine, "versions": {}}
    previous = {"meta": old_meta, "rows": [named("a", 1.0).as_json(), named("b", 2.0).as_json()]}
    partial = {"finished": "now", "duration": 9.0, "machine": machine, "load_average_at_start": [2.0]}
    rows, meta = merge_into(previous, [named("b", 5.0), named("c", 6.0)], {**partial, "scenarios": ["b", "c"]})
    assert [(r.scenario, r.ours.value) for r in rows] == [("a", 1.0), ("b", 5.0), ("c", 6.0)]
    assert rows[0].anchors["tini"].value == 1.0
    assert meta["finished"] == "then" and [m["scenarios"] for m in meta["merged"]] == [["b", "c"]]
    # Re-measuring c alone later keeps the note about b and c: b is still from then.
    _, again = merge_into(
        {"meta": meta, "rows": [r.as_json() for r in rows]}, [named("c", 7.0)], {**partial, "scenarios": ["c"]}
    )
    assert [m["scenarios"] for m in again["merged"]] == [["b", "c"], ["c"]]


def floor_row(ours: Figure, floor: Figure | None) -> Row:
    anchors = {"tini": Figure(0.5)} | ({FLOOR: floor} if floor is not None else {})
    return Row("start-up", "median", "ms", Target.floor_multiple(1.5), ours, anchors)


def test_a_floor_target_is_a_multiple_of_the_floor_in_the_same_row() -> None:
    assert floor_row(Figure(15.0), Figure(10.0)).status == "pass"
    assert floor_row(Figure(15.1), Figure(10.0)).status == "fail"
    # Another run, another floor: the same figure is judged against it.
    assert floor_row(Figure(15.1), Figure(12.0)).status == "pass"
    assert floor_row(Figure(15.0), Figure(10.0)).floor_ratio == 1.5
    assert floor_row(Figure(15.0), Figure(10.0)).limit == 15.0


def test_without_a_right_floor_a_floor_target_is_not_judged() -> None:
    assert floor_row(Figure(1.0), None).status == "not measured"
    assert floor_row(Figure(1.0), Figure(10.0, problems=["exit status 1, expected 0"])).status == "not measured"
    assert floor_row(Figure(1.0, problems=["a traceback"]), None).status == "fail"


def test_the_table_shows_the_floor_its_ratio_and_the_limit_it_made() -> None:
    from benchmarks._report import render_table

    table = render_table([floor_row(Figure(20.0), Figure(10.0))])
    head = [cell.strip() for cell in table[0].strip("|").split("|")]
    cells = dict(zip(head, (cell.strip() for cell in table[2].strip("|").split("|")), strict=True))
    assert (cells[FLOOR], cells["× floor"]) == ("10.0", "2.00×")
    assert cells["target"] == "≤ 1.5 × Python floor (15.0 ms)" and cells["result"] == "**FAIL**"


def test_a_floor_target_survives_a_merge() -> None:
    row = floor_row(Figure(20.0), Figure(10.0))
    again = Row.from_json(row.as_json())
    assert again.target == row.target and again.status == "fail" and again.limit == 15.0
