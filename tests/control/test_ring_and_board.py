"""The logs ring and the health board on their own: bounds and verdicts."""

from __future__ import annotations

from supervisor.control.logs import LINE_LIMIT, LogLine, LogRing
from supervisor.health.board import Board, CheckState


def test_the_ring_keeps_the_last_lines_of_each_process_and_cuts_long_ones() -> None:
    ring = LogRing(limit=3)
    for i in range(1000):
        ring.observe("a", "stdout", f"a{i}".encode())
    ring.observe("b", "stderr", b"x" * (10 * LINE_LIMIT))
    assert [line.text for line in ring.recent("a", 100)] == ["a997", "a998", "a999"]
    (long,) = ring.recent("b", 5)
    assert long.stream == "stderr" and long.text.endswith("…[cut]") and len(long.text) < LINE_LIMIT + 20
    assert len(ring.recent(None, 100)) == 4 and ring.seen == 1001
    assert ring.recent("a", 0) == [] and ring.recent("nobody", 5) == []


def test_followers_see_new_lines_until_they_stop() -> None:
    ring = LogRing(limit=0)  # nothing kept, still followed
    seen: list[LogLine] = []
    stop = ring.follow(seen.append)
    ring.observe("a", "stdout", b"one\r")
    stop()
    ring.observe("a", "stdout", b"two")
    assert [line.text for line in seen] == ["one"] and ring.recent("a", 5) == []


def test_a_check_is_down_after_threshold_failures_in_a_row_and_up_after_one_success() -> None:
    board = Board()
    board.add(CheckState(name="c", level="alive", threshold=3))
    board.result("c", False, "refused")
    board.result("c", False, "refused")
    assert board.checks["c"].up is None and board.alive([]).ok
    board.result("c", False, "refused")
    assert board.checks["c"].down
    assert board.alive([]).reasons == ("check c: failed 3 time(s) in a row: refused",)
    board.result("c", True)
    assert board.alive([]).ok and board.checks["c"].failures == 0


def test_ready_waits_for_ready_checks_and_fails_during_a_shutdown() -> None:
    board = Board()
    board.add(CheckState(name="r", level="ready"))
    assert board.ready([], None).reasons == ("check r: not passed yet",)
    board.result("r", True)
    assert board.ready([], None).ok
    assert board.ready([], "received SIGTERM").reasons == ("shutting down: received SIGTERM",)
    board.set_status("p", "two\nlines")
    assert board.status_lines == {"p": "two lines"}
    board.set_status("p", None)
    assert board.status_lines == {}
