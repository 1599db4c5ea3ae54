"""Start and stop order from ``depends_on``, and whether the stops fit the budget."""

from __future__ import annotations

import graphlib
from collections.abc import Mapping, Sequence

from .._units import format_duration
from ._errors import Problem
from ._model import Config, ProcessSpec

__all__ = ["budget_problems", "find_cycles", "start_levels", "stop_levels"]


def start_levels(config: Config) -> list[list[ProcessSpec]]:
    """Processes grouped by dependency depth: level 0 depends on nothing.

    A level starts once every process of the levels before it is ready; the
    processes of one level start together.  Within a level the file's order
    is kept.  Dependencies on names that are not in ``config`` are ignored
    (load_config has already reported them).
    """
    names = {p.name for p in config.processes}
    graph = {p.name: [d for d in p.depends_on if d in names] for p in config.processes}
    try:
        order = list(graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError as exc:
        raise ValueError(f"dependency cycle: {' -> '.join(reversed(exc.args[1]))}") from None
    depth: dict[str, int] = {}
    for name in order:
        depth[name] = 1 + max((depth[d] for d in graph[name]), default=-1)
    levels: list[list[ProcessSpec]] = [[] for _ in range(max(depth.values(), default=-1) + 1)]
    for process in config.processes:
        levels[depth[process.name]].append(process)
    return levels


def stop_levels(config: Config) -> list[list[ProcessSpec]]:
    """The reverse of ``start_levels``: dependents stop before what they depend on."""
    return start_levels(config)[::-1]


def find_cycles(graph: Mapping[str, Sequence[str]]) -> list[list[str]]:
    """One cycle per group of processes that depend on each other, as a path
    that ends where it starts (``[a, b, a]``), in the order of ``graph``.

    Self-dependencies and unknown names are left to the caller.
    """
    edges = {n: [d for d in deps if d in graph and d != n] for n, deps in graph.items()}
    order = {name: i for i, name in enumerate(graph)}
    cycles = []
    for component in _strong_components(edges):
        if len(component) < 2:
            continue
        members = set(component)
        start = min(component, key=order.__getitem__)
        cycles.append(_cycle_through(start, edges, members))
    cycles.sort(key=lambda c: order[c[0]])
    return cycles


def _strong_components(edges: Mapping[str, Sequence[str]]) -> list[list[str]]:
    return _Tarjan(edges).components()


class _Tarjan:
    """Tarjan's strongly connected components, iteratively: a long chain of
    dependencies must not hit the recursion limit.  The explicit ``work``
    stack holds (node, next edge to follow); the entry below a node's is
    always its parent in the search."""

    def __init__(self, edges: Mapping[str, Sequence[str]]) -> None:
        self.edges = edges
        self.index: dict[str, int] = {}
        self.low: dict[str, int] = {}
        self.stack: list[str] = []
        self.on_stack: set[str] = set()
        self.found: list[list[str]] = []

    def components(self) -> list[list[str]]:
        for root in self.edges:
            if root not in self.index:
                self._search(root)
        return self.found

    def _search(self, root: str) -> None:
        work: list[tuple[str, int]] = [(root, 0)]
        while work:
            node, next_edge = work.pop()
            if next_edge == 0:
                self._enter(node)
            targets = self.edges[node]
            if next_edge < len(targets):
                work.append((node, next_edge + 1))
                self._follow(node, targets[next_edge], work)
            else:
                self._leave(node, work[-1][0] if work else None)

    def _enter(self, node: str) -> None:
        self.index[node] = self.low[node] = len(self.index)
        self.stack.append(node)
        self.on_stack.add(node)

    def _follow(self, node: str, target: str, work: list[tuple[str, int]]) -> None:
        if target not in self.index:
            work.append((target, 0))
        elif target in self.on_stack:
            self.low[node] = min(self.low[node], self.index[target])

    def _leave(self, node: str, parent: str | None) -> None:
        if self.low[node] == self.index[node]:
            # node is the root of a component: it and everything above it.
            component = []
            while True:
                member = self.stack.pop()
                self.on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            self.found.append(component)
        if parent is not None:
            self.low[parent] = min(self.low[parent], self.low[node])


def _cycle_through(start: str, edges: Mapping[str, Sequence[str]], members: set[str]) -> list[str]:
    """A shortest path from ``start`` back to itself inside one component."""
    previous: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for target in edges[node]:
                if target not in members:
                    continue
                if target == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(previous[path[-1]])
                    return [*reversed(path), start]
                if target not in previous:
                    previous[target] = node
                    following.append(target)
        frontier = following
    raise AssertionError("a strong component always has a cycle")


def budget_problems(config: Config) -> list[Problem]:
    """Whether the stop timeouts fit in the grace period, stop level after level.

    Each level waits as long as its slowest process (``stop_timeout``; a
    process without one takes what is left, so it never overruns).  If the sum
    exceeds ``grace_period``, the later processes would be killed before their
    own timeout began: one problem, at the ``grace_period`` key.
    """
    levels = stop_levels(config)
    parts = []
    total = 0.0
    for number, level in enumerate(levels, start=1):
        timed = [p for p in level if p.stop_timeout is not None]
        if not timed:
            continue
        slowest = max(timed, key=lambda p: p.stop_timeout or 0.0)
        assert slowest.stop_timeout is not None
        total += slowest.stop_timeout
        parts.append(f"level {number} ({slowest.name}) {format_duration(slowest.stop_timeout)}")
    if total <= config.grace_period:
        return []
    position = config.positions.get("grace_period") or config.positions.get("processes")
    message = (
        f"grace_period: the stop timeouts do not fit: {' + '.join(parts)} = "
        f"{format_duration(total)}, more than the grace period of "
        f"{format_duration(config.grace_period)}; "
        "raise grace_period (and the pod's terminationGracePeriodSeconds) or lower stop_timeout"
    )
    return [Problem(position, message)]
