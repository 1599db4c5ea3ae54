"""Start levels, stop order and the grace-period budget check."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from supervisor.config import Config, ProcessSpec, budget_problems, start_levels, stop_levels
from supervisor.config._order import find_cycles

Load = Callable[..., Config]  # the `load` fixture


def names(levels: list[list[ProcessSpec]]) -> list[list[str]]:
    return [[p.name for p in level] for level in levels]


def test_levels_follow_dependencies_and_keep_file_order(load: Load) -> None:
    config = load(
        """
        processes:
          - {name: controller, command: x, depends_on: [libvirtd, metrics]}
          - {name: libvirtd, command: x, depends_on: [virtlogd]}
          - {name: metrics, command: x}
          - {name: virtlogd, command: x}
          - {name: sidecar, command: x, depends_on: [metrics]}
        """
    )
    assert names(start_levels(config)) == [
        ["metrics", "virtlogd"],
        ["libvirtd", "sidecar"],
        ["controller"],
    ]
    assert names(stop_levels(config)) == [
        ["controller"],
        ["libvirtd", "sidecar"],
        ["metrics", "virtlogd"],
    ]


def test_no_processes_no_levels() -> None:
    assert start_levels(Config()) == []
    assert budget_problems(Config()) == []


def test_long_chain_does_not_hit_the_recursion_limit() -> None:
    processes = [ProcessSpec(name="p0", command=("x",))]
    processes += [ProcessSpec(name=f"p{i}", command=("x",), depends_on=(f"p{i - 1}",)) for i in range(1, 3000)]
    for order in (processes, processes[::-1]):
        levels = start_levels(Config(processes=tuple(order)))
        assert len(levels) == 3000 and levels[-1][0].name == "p2999"


def test_levels_of_a_hand_made_cycle_raise() -> None:
    config = Config(
        processes=(
            ProcessSpec(name="a", command=("x",), depends_on=("b",)),
            ProcessSpec(name="b", command=("x",), depends_on=("a",)),
        )
    )
    with pytest.raises(ValueError, match="dependency cycle: a -> b -> a"):
        start_levels(config)


def test_find_cycles_reports_each_group_once() -> None:
    graph = {
        "a": ["b"],
        "b": ["c"],
        "c": ["a", "d"],
        "d": [],
        "e": ["f"],
        "f": ["e", "unknown"],
        "g": ["g"],
    }
    assert find_cycles(graph) == [["a", "b", "c", "a"], ["e", "f", "e"]]
    assert find_cycles({"x": ["y"], "y": []}) == []


def test_budget_fits(load: Load) -> None:
    config = load(
        """
        grace_period: 30s
        processes:
          - {name: db, command: x, stop_timeout: 10s}
          - {name: app, command: x, depends_on: [db], stop_timeout: 20s}
        """
    )
    assert budget_problems(config) == []


def test_budget_sums_the_slowest_process_of_each_level(load: Load) -> None:
    config = load(
        """
        grace_period: 30s
        processes:
          - {name: libvirtd, command: x, stop_timeout: 15s}
          - {name: controller, command: x, depends_on: [libvirtd], stop_timeout: 20s}
          - {name: sidecar, command: x, depends_on: [libvirtd], stop_timeout: 5s}
          - {name: logger, command: x}
        """
    )
    (problem,) = budget_problems(config)
    assert problem.position is not None
    assert (problem.position.line, problem.position.column) == (1, 1)
    assert problem.message == (
        "grace_period: the stop timeouts do not fit: level 1 (controller) 20s + "
        "level 2 (libvirtd) 15s = 35s, more than the grace period of 30s; raise grace_period "
        "(and the pod's terminationGracePeriodSeconds) or lower stop_timeout"
    )


def test_processes_without_stop_timeout_take_what_is_left(load: Load) -> None:
    config = load(
        """
        grace_period: 5s
        processes:
          - {name: a, command: x}
          - {name: b, command: x, depends_on: [a]}
        """
    )
    assert budget_problems(config) == []
