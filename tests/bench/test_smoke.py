"""The benchmark suite at a tiny size, through its real runner.

``python -m benchmarks --smoke`` runs every scenario once (a handful of
signals, forty orphans, one guest...) against the supervisor and every
anchor, each as PID 1 of its own namespace.  The test asserts the answers a
user of the suite relies on — every row is there and measured, every init
exited with the right status, nothing was left running, every orphan was
reaped — and never a timing: those belong to ``make bench``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

# The rolling-update scenario starts the machine's one real node, which the
# tests of tests/realnode take in turn: in their group the run never waits
# for the node's lock (under load, their turn took longer than the 600 s the
# scenario waits for it).
pytestmark = [pytest.mark.xdist_group("real-node"), pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
SCENARIOS = {
    "start-up",
    "signal forwarding",
    "orphan storm",
    "exit latency",
    "memory",
    "hook concurrency",
    "escalation accuracy",
    "overrun",
    "endpoint drain",
    "drain cost",
    "lease hand-over",
    "VM shutdown",
    "VM enforcer",
    "VM enforcer, late-found",
    "rolling update",
}


def run_benchmarks(*args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    """Run the runner; past ``timeout``, fail with what it printed so far
    (its progress on stderr says which scenario it was in)."""
    try:
        return subprocess.run(
            [sys.executable, "-m", "benchmarks", *args],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        printed = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else exc.stderr or ""
        raise AssertionError(f"the benchmarks ran for more than {timeout:g}s; so far:\n{printed}") from None


def test_smoke_run(tmp_path: Path) -> None:
    """One run of the runner, checked from every side.  (One test, not a
    module fixture shared by several: under pytest-xdist each worker would
    run its own copy of the whole suite.)"""
    results, docs = tmp_path / "results.json", tmp_path / "benchmarks.md"
    # About 3 minutes on a 2-core machine with a few other jobs before the
    # rolling update moved to the real node; since, that scenario alone
    # starts a cluster with a kubelet and rolls three Deployments, and with
    # every core taken (make test-loaded) the whole run needed more than
    # 15 minutes.  The bound is for a run that hangs, not a speed test.
    proc = run_benchmarks("--smoke", "--json", str(results), "--docs", str(docs), timeout=2400)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(results.read_text())
    check_every_scenario_is_measured_for_the_supervisor(data)
    check_every_init_gave_the_right_answers(data)
    check_the_anchors_are_measured_in_the_same_run(data)
    check_the_table_is_regenerated(data, docs.read_text())


def _problems(row: dict[str, Any]) -> list[str]:
    found = [f"supervisor: {p}" for p in row["supervisor"]["problems"]]
    for name, figure in row["anchors"].items():
        found += [f"{name}: {p}" for p in figure["problems"]]
    return found


def check_every_scenario_is_measured_for_the_supervisor(data: dict[str, Any]) -> None:
    rows = data["rows"]
    assert {row["scenario"] for row in rows} == SCENARIOS
    # Start-up, signal p50 and memory again with a plan, judged against the same run's floor;
    # start-up also without the compiled plan `supervisor check` writes.
    with_plan = [row for row in rows if "with a plan" in row["measure"]]
    assert sorted(row["scenario"] for row in with_plan) == ["memory", "signal forwarding", "start-up", "start-up"]
    assert sum(row["measure"].endswith("not compiled") for row in with_plan) == 1
    assert all(row["anchors"]["Python floor"]["value"] is not None for row in with_plan)
    unmeasured = [(row["scenario"], row["supervisor"]["note"]) for row in rows if row["supervisor"]["value"] is None]
    assert not unmeasured


def check_every_init_gave_the_right_answers(data: dict[str, Any]) -> None:
    """Exit statuses, nothing left running, every orphan reaped, every hook
    finished, guests shut down gracefully: for the supervisor and the anchors."""
    wrong = {row["scenario"] + " / " + row["measure"]: _problems(row) for row in data["rows"] if _problems(row)}
    assert not wrong


def check_the_anchors_are_measured_in_the_same_run(data: dict[str, Any]) -> None:
    by_scenario: dict[str, dict[str, Any]] = {}
    for row in data["rows"]:
        by_scenario.setdefault(row["scenario"], row)  # memory: the idle row before the Kubernetes one
    for scenario in ("start-up", "orphan storm", "exit latency", "memory"):
        anchors = by_scenario[scenario]["anchors"]
        assert {"Python floor", "tini", "dumb-init", "catatonit", "supervisord"} <= set(anchors)
        assert all(figure["value"] is not None for figure in anchors.values()), (scenario, anchors)
    # supervisord forwards no signals and the C inits never escalate: said, not hidden.
    signals = by_scenario["signal forwarding"]["anchors"]
    assert signals["supervisord"]["value"] is None and signals["supervisord"]["note"]
    assert by_scenario["escalation accuracy"]["anchors"]["supervisord"]["value"] is not None
    assert "no escalation" in by_scenario["escalation accuracy"]["anchors"]["tini"]["note"]


def check_the_table_is_regenerated(data: dict[str, Any], docs: str) -> None:
    table = [line for line in docs.splitlines() if line.startswith("| ")]
    assert table[0].startswith("| scenario | measure | unit | supervisor | Python floor | × floor | tini |")
    assert len(table) == 1 + len(data["rows"])
    assert data["meta"]["smoke"] is True
    # Measured as the image starts it (benchmarks._bench.as_the_image_runs_it).
    assert data["meta"]["versions"]["supervisor"].endswith("run with the image's python -OO)")


def test_an_unknown_scenario_is_one_line_and_exit_2() -> None:
    proc = run_benchmarks("--only", "startup", "nonsense", timeout=120)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "nonsense" in lines[0], proc.stderr
