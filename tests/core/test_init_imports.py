"""What the init layer imports, and that the package imports without cycles.

The init layer is PID 1 for the life of the pod and runs before signals are
unblocked in the orchestrator: whatever it imports is start-up time and
memory it keeps for ever, and a heavy or third-party import there (trio,
pluggy, PyYAML) would also run code before the shutdown machinery exists.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "supervisor"

# Not in PID 1: third-party packages, and the stdlib's heavy ones that the
# init layer has no use for (dataclasses brings inspect, ast and dis).
NOT_IN_PID1 = ("trio", "pluggy", "yaml", "kubernetes", "prctl", "logging", "json", "dataclasses", "inspect", "asyncio")


def test_the_init_layer_imports_only_light_stdlib_modules() -> None:
    code = (
        "import sys; before = set(sys.modules); import supervisor._main, supervisor.pid1.direct; "
        "print(sorted(set(sys.modules) - before))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = ast.literal_eval(result.stdout)
    assert "supervisor.pid1.init" in loaded and "supervisor.pid1.direct" in loaded
    heavy = [name for name in loaded if name.split(".")[0] in NOT_IN_PID1]
    assert heavy == [], heavy
    ours = {name for name in loaded if name.split(".")[0] == "supervisor"}
    # Everything of ours that PID 1 loads is stdlib-only itself (checked by
    # reading it: no import of anything outside the stdlib and the package).
    for name in ours:
        outside = _third_party_imports(name)
        assert outside == set(), (name, outside)


# What PID 1 may import beyond the Python floor (benchmarks/floor_init.py:
# os, signal, sys, and what they bring: enum, functools, collections, types,
# operator): the package's own modules, ``__future__`` (the module the
# ``from __future__`` statement loads, a few dozen lines), the ``errno``
# built in, and the two small extension modules of the status pipe
# (``fcntl``: F_SETSIG; ``mmap``: the shared page).  ``typing`` alone was
# 5 ms of a 13 ms floor; ``argparse`` brought ``re``, ``gettext`` and
# ``shutil`` (with zlib, bz2 and lzma mapped into PID 1 for good).
BEYOND_THE_FLOOR = {"__future__", "errno", "fcntl", "mmap"}
NEVER_IN_PID1 = ("typing", "re", "argparse", "contextlib", "shutil", "importlib.util", "dataclasses", "gettext")

# As far as PID 1 gets before it forks, on either path: imported, the
# command line parsed (once argparse built a parser here), the init object
# made.  ``-S``: no site-packages, so that no .pth file (an editable
# install's finder imports pathlib and re) hides what the package imports.
_PID1_SO_FAR = """
import sys
sys.path.insert(0, {root!r})
import os, signal
floor = set(sys.modules)
from supervisor._main import main
from supervisor.pid1.options import parse_run_args
from supervisor.pid1.direct import DirectInit
from supervisor.pid1.orchestrated import OrchestratorInit
import supervisor.pid1.early, supervisor.pid1.protocol
DirectInit(parse_run_args(["-vgp", "TERM", "--grace-period=2s", "-e", "143", "--", "true"]))
OrchestratorInit(parse_run_args(["-c", "plan.yaml", "--rewrite", "TERM:QUIT", "--log-format", "json"]))
print(sorted(set(sys.modules) - floor))
"""


def _pid1_imports_beyond_the_floor() -> list[str]:
    code = _PID1_SO_FAR.format(root=str(PACKAGE.parent))
    result = subprocess.run([sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True, check=True)
    loaded: list[str] = ast.literal_eval(result.stdout)
    return loaded


def test_pid1_imports_nothing_the_python_floor_does_not() -> None:
    loaded = _pid1_imports_beyond_the_floor()
    assert {"supervisor._main", "supervisor.pid1.direct", "supervisor.pid1.orchestrated"} <= set(loaded)
    assert [name for name in NEVER_IN_PID1 if name in loaded] == []
    extra = [name for name in loaded if name.split(".")[0] != "supervisor" and name not in BEYOND_THE_FLOOR]
    assert extra == [], extra


# What PID 1's package may import of the rest: stdlib-only leaves that both
# processes share (value types, the log line, /proc, the parser's errors).
SHARED_LEAVES = {
    "supervisor",
    "supervisor._units",
    "supervisor._log",
    "supervisor._status",
    "supervisor._procstat",
    "supervisor._usage",
}


def test_pid1_sits_at_the_bottom_of_the_import_graph() -> None:
    graph = _import_graph()
    pid1 = {name for name in graph if name.startswith("supervisor.pid1")}
    assert {"supervisor.pid1.init", "supervisor.pid1.protocol", "supervisor.pid1.options"} <= pid1
    above = {name: sorted(graph[name] - pid1 - SHARED_LEAVES) for name in pid1}
    assert all(not edges for edges in above.values()), above
    for leaf in SHARED_LEAVES - {"supervisor"}:
        assert graph[leaf] <= SHARED_LEAVES, (leaf, graph[leaf])


def test_the_package_has_no_import_cycles() -> None:
    graph = _import_graph()
    assert len(graph) > 40  # the package was found and read
    cycles = _cycles(graph)
    assert cycles == [], cycles


def test_the_cycle_finder_finds_a_cycle() -> None:
    # The finder above must be able to fail.
    graph = {"p.a": {"p.b"}, "p.b": {"p.c"}, "p.c": {"p.a"}, "p.d": {"p.a"}}
    assert _cycles(graph) == [["p.a", "p.b", "p.c"]]


def test_the_subpackages_have_no_import_cycles() -> None:
    # One arrow between two subpackages, whichever of their modules it runs
    # between: supervisor.control may use supervisor.health or the reverse,
    # not both, even when no two modules import each other.
    graph = _package_graph(_import_graph())
    assert {"supervisor.control", "supervisor.health", "supervisor.runtime", "supervisor.config"} <= set(graph)
    cycles = _cycles(graph)
    assert cycles == [], cycles


def test_the_package_graph_finds_a_cycle_no_two_modules_make() -> None:
    # p.x.a → p.y.b and p.y.c → p.x.d: no module cycle, a package one.
    modules = {"p.x.a": {"p.y.b"}, "p.y.b": set(), "p.y.c": {"p.x.d"}, "p.x.d": set(), "p.top": {"p.x.a"}}
    assert _cycles(modules) == []
    assert _cycles(_package_graph(modules, root="p")) == [["p.x", "p.y"]]


# -- reading the package -----------------------------------------------------------


def _modules() -> dict[str, tuple[Path, bool]]:
    """Module name → (file, is a package)."""
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts = parts[:-1]
        found[".".join(parts)] = (path, is_package)
    return found


def _module_level_imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """Imports that run when the module is imported: not those inside
    functions, nor under ``if TYPE_CHECKING:``."""
    found: list[ast.Import | ast.ImportFrom] = []

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.Import | ast.ImportFrom):
                found.append(node)
            elif isinstance(node, ast.If):
                if not _is_type_checking(node.test):
                    visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.Try):
                for block in (node.body, node.orelse, node.finalbody, *(h.body for h in node.handlers)):
                    visit(block)
            elif isinstance(node, ast.With):
                visit(node.body)

    visit(tree.body)
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _targets(module: str, is_package: bool, node: ast.Import | ast.ImportFrom) -> list[str]:
    """The absolute names an import statement imports (a ``from`` import
    also names each imported name, which may be a submodule)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        parts = module.split(".")
        if not is_package:
            parts = parts[:-1]
        parts = parts[: len(parts) - (node.level - 1)]
        base = ".".join([*parts, *([node.module] if node.module else [])])
    return [base, *(f"{base}.{alias.name}" for alias in node.names)]


def _import_graph() -> dict[str, set[str]]:
    """Module → the package's modules it imports when it is imported.

    Importing ``a.b.c`` runs ``a`` and ``a.b`` first, so those count too,
    except a package the importer is inside of: it is already being
    imported, and taking submodules from it is no cycle."""
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for module, (path, is_package) in modules.items():
        inside = {".".join(module.split(".")[:i]) for i in range(1, module.count(".") + 1)}
        if is_package:
            inside.add(module)
        edges: set[str] = set()
        for node in _module_level_imports(ast.parse(path.read_text())):
            names = _targets(module, is_package, node)
            only_submodules = isinstance(node, ast.ImportFrom) and all(name in modules for name in names[1:])
            for index, name in enumerate(names):
                parts = name.split(".")
                edges.update(".".join(parts[:i]) for i in range(1, len(parts)) if ".".join(parts[:i]) not in inside)
                if name in modules and name != module and not (index == 0 and name in inside and only_submodules):
                    edges.add(name)
        graph[module] = {edge for edge in edges if edge in modules and edge != module}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every group of modules that import each other, directly or not,
    each sorted.  (A module is in one when it can reach itself.)"""
    reach = {node: _reachable(graph, node) for node in graph}
    groups = {
        frozenset({node, *(other for other in reach[node] if node in reach[other])})
        for node in graph
        if node in reach[node]
    }
    return sorted(sorted(group) for group in groups)


def _package_graph(graph: dict[str, set[str]], root: str = "supervisor") -> dict[str, set[str]]:
    """The module graph with each subpackage of ``root`` as one node (its
    modules and subpackages folded into it); the modules directly in
    ``root`` stay nodes of their own."""

    def node(module: str) -> str:
        parts = module.split(".")
        return ".".join(parts[:2]) if parts[0] == root and len(parts) > 1 else module

    folded: dict[str, set[str]] = {}
    for module, imports in graph.items():
        edges = folded.setdefault(node(module), set())
        edges.update(node(target) for target in imports if node(target) != node(module))
    return folded


def _reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen: set[str] = set()
    todo = list(graph.get(start, ()))
    while todo:
        node = todo.pop()
        if node not in seen:
            seen.add(node)
            todo.extend(graph.get(node, ()))
    return seen


def _third_party_imports(module: str) -> set[str]:
    path, is_package = _modules()[module]
    outside = set()
    for node in _module_level_imports(ast.parse(path.read_text())):
        names = _targets(module, is_package, node)
        # ``from x import y``: x is the module; y is a name in it.
        for name in names[:1] if isinstance(node, ast.ImportFrom) else names:
            top = name.split(".")[0]
            if top and top != "supervisor" and top not in sys.stdlib_module_names:
                outside.add(top)
    return outside
