"""The public API is one list, ``supervisor._EXPORTS``, and everything that
shows the API agrees with it: ``__all__``, ``dir()``, the lazy loader, and
what a type checker sees (the imports under TYPE_CHECKING).  Plugins use
only that API, and importing the package stays free of trio and pluggy."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

import supervisor

ROOT = Path(__file__).resolve().parents[2]
INIT = ROOT / "supervisor" / "__init__.py"


def _module_ast() -> ast.Module:
    return ast.parse(INIT.read_text(), str(INIT))


def _declared_list() -> dict[str, str]:
    """``_EXPORTS`` as written in the source."""
    for node in _module_ast().body:
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["_EXPORTS"]:
            value = ast.literal_eval(node.value)
            assert isinstance(value, dict)
            return value
    raise AssertionError("no _EXPORTS = {...} in supervisor/__init__.py")


def _type_checking_imports() -> list[tuple[str, str, str | None]]:
    """(name, module, alias) of every import under ``if TYPE_CHECKING:``."""
    found: list[tuple[str, str, str | None]] = []
    for node in _module_ast().body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            for stmt in node.body:
                assert isinstance(stmt, ast.ImportFrom), ast.dump(stmt)
                module = "." * stmt.level + (stmt.module or "")
                found.extend((alias.name, module, alias.asname) for alias in stmt.names)
    return found


def test_the_list_is_literal_and_matches_the_runtime_one() -> None:
    assert _declared_list() == supervisor._EXPORTS


def test_all_and_dir_are_the_list() -> None:
    assert len(supervisor.__all__) == len(set(supervisor.__all__))
    assert set(supervisor.__all__) == {*supervisor._EXPORTS, "__version__"}
    assert dir(supervisor) == sorted(supervisor.__all__)


def test_type_checkers_see_exactly_the_list() -> None:
    imports = _type_checking_imports()
    # `from M import X as X` is the form mypy --strict treats as a re-export;
    # a bare `import X` would be private to the module.
    assert [name for name, _, alias in imports if alias != name] == []
    assert sorted((name, module) for name, module, _ in imports) == sorted(supervisor._EXPORTS.items())


@pytest.mark.parametrize("name", sorted(supervisor._EXPORTS))
def test_each_name_loads_from_its_module(name: str) -> None:
    defining = importlib.import_module(supervisor._EXPORTS[name], "supervisor")
    assert getattr(supervisor, name) is getattr(defining, name)


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="has no attribute 'not_a_thing'"):
        supervisor.not_a_thing  # type: ignore[attr-defined]  # noqa: B018


def test_importing_the_package_imports_neither_trio_nor_pluggy() -> None:
    # The console script imports the package before signals are blocked;
    # importing trio there (~70 ms) would leave a SIGTERM unhandled.
    code = "import sys, supervisor; print(sorted(m for m in ('trio', 'pluggy', 'yaml') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]"


def test_mypy_sees_the_exports_and_nothing_else(tmp_path: Path) -> None:
    api = pytest.importorskip("mypy.api")
    names = ", ".join(sorted(supervisor.__all__))
    snippet = tmp_path / "uses_api.py"
    snippet.write_text(f"from supervisor import {names}\nfrom supervisor import Deadlin\n")
    out, err, status = api.run(["--strict", "--cache-dir", str(tmp_path / "cache"), str(snippet)])
    errors = [line for line in out.splitlines() if ": error:" in line]
    # Only the misspelt name: every public one resolves, and the module's
    # run-time __getattr__ does not make every attribute exist for mypy.
    assert len(errors) == 1 and 'has no attribute "Deadlin"' in errors[0], out + err
    assert status == 1


def _imports_of_supervisor(path: Path) -> list[tuple[str, int, str]]:
    """(module, line, name) of every ``from supervisor... import name`` in ``path``."""
    found: list[tuple[str, int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "supervisor" or node.module.startswith("supervisor."):
                found.extend((node.module, node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.Import):
            found.extend((alias.name, node.lineno, "*") for alias in node.names if alias.name.startswith("supervisor."))
    return found


def test_plugins_and_examples_use_only_the_public_api() -> None:
    # The built-in plugins are separate distributions, written as a third
    # party's would be: only what `supervisor` exports (their tests may look
    # deeper).  A name missing here is either a new export or a private use.
    sources = [
        path
        for top in ("plugins", "examples")
        for path in sorted((ROOT / top).rglob("*.py"))
        if "tests" not in path.relative_to(ROOT).parts
    ]
    assert sources, "no plugin sources found"
    outside = [
        f"{path.relative_to(ROOT)}:{line}: {module} {name}"
        for path in sources
        for module, line, name in _imports_of_supervisor(path)
        if module != "supervisor" or name not in supervisor.__all__
    ]
    assert outside == []
