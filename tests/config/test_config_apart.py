"""``load_config(..., apart=True)``: the YAML parsed by a short-lived child,
with the same result as a parse in place, and PyYAML never loaded here."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from types import MappingProxyType

import pytest

from supervisor.config import Config, ConfigError, _apart, _source, load_config, plain_settings
from supervisor.config._nodes import Node

_REAL_PARSE = _source.parse_file

DOCUMENTS = {
    "full": """
        grace_period: 45s
        x-base: &base {restart: on-failure, env: {MODE: "${MODE:-prod}", PORT: 8080, DEBUG: yes}}
        log: {format: json, level: debug}
        processes:
          - <<: *base
            name: web
            command: ["web", "--port", "8080"]
            main: true
          - <<: *base
            name: worker
            command: worker --queue "a b"
            depends_on: [web]
            stop_timeout: 1.5
        x-extra: {started: 2024-01-01, ratio: .inf, big: 123456789012345678901234567890, "=": value}
        plugins:
          sleep: {seconds: 5}
          kubernetes:
    """,
    "problems": """
        grace_period: soon
        processes:
          - {name: a, command: [a], name: b}
          - {name: c, command: !!python/object:os.system [c]}
          - {command: [d], 7: x}
    """,
    "aliases": """
        x-shared: &shared [1, 2, {deep: &inner [a, b]}]
        processes:
          - {name: one, command: [one], args: *shared, more: *inner}
          - {name: two, command: [two], args: *shared}
    """,
    "empty": "",
    "scalar": "just text\n",
    "broken": "processes: [\n",
    "unicode": "processes:\n  - {name: café, command: ['\\u00e9', \"\\ud800\"]}\n",
}


@pytest.fixture
def in_child_only(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Fail the test if the file is parsed in this process: the comparison
    must be between a child's parse and one in place."""
    parent = os.getpid()

    def parse_file(path: str, environ: dict[str, str]) -> object:
        if os.getpid() == parent:
            raise AssertionError("parsed in the test's own process")
        return _REAL_PARSE(path, environ)

    monkeypatch.setattr(_source, "parse_file", parse_file)
    # A test process is not an orchestrator: earlier tests in this worker
    # may have left threads (output readers, xdist's own), and with other
    # threads running the file is rightly parsed in place
    # (test_other_threads_running_mean_a_parse_in_place).  The child here
    # takes no lock such a thread could hold: PyYAML is already imported.
    monkeypatch.setattr(_apart, "_other_threads", lambda: False)
    yield


def _shape(node: Node | None, seen: dict[int, int]) -> object:
    """Everything a node holds, with shared sub-trees named by first visit."""
    if node is None:
        return None
    if id(node) in seen:
        return ("shared", seen[id(node)])
    seen[id(node)] = len(seen)
    value = node.value
    if isinstance(value, list):
        value = [_shape(item, seen) for item in value]
    elif isinstance(value, dict):
        value = {key: _shape(item, seen) for key, item in value.items()}
    return (value, node.position, node.text, node.keys, node.bad)


def _write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "deploy.yaml"
    path.write_text(textwrap.dedent(text).lstrip("\n"))
    return str(path)


@pytest.mark.parametrize("name", sorted(DOCUMENTS))
def test_the_child_parses_the_same_tree_as_a_parse_in_place(tmp_path: Path, name: str, in_child_only: None) -> None:
    path = _write(tmp_path, DOCUMENTS[name])
    environ = {"MODE": "test"}
    root, problems = _REAL_PARSE(path, environ)
    root_apart, problems_apart = _apart.parse_file_apart(path, environ)
    assert (_shape(root_apart, {}), problems_apart) == (_shape(root, {}), problems)


def test_aliases_stay_shared_sub_trees(tmp_path: Path, in_child_only: None) -> None:
    root, problems = _apart.parse_file_apart(_write(tmp_path, DOCUMENTS["aliases"]), {})
    assert problems == [] and root is not None
    one, two = root.value["processes"].value  # type: ignore[index,union-attr]
    assert one.value["args"] is two.value["args"]
    assert one.value["more"] is one.value["args"].value[2].value["deep"]


def test_load_config_apart_gives_the_same_config_and_the_same_errors(tmp_path: Path, in_child_only: None) -> None:
    path = _write(tmp_path, DOCUMENTS["full"])
    apart_config = load_config(path, {"MODE": "x"}, apart=True)
    assert _comparable(apart_config) == _comparable(_in_place(lambda: load_config(path, {"MODE": "x"})))
    bad = _write(tmp_path, DOCUMENTS["problems"])
    with pytest.raises(ConfigError) as apart:
        load_config(bad, {}, apart=True)
    with pytest.raises(ConfigError) as in_place:
        _in_place(lambda: load_config(bad, {}))
    assert str(apart.value) == str(in_place.value) and len(apart.value.problems) > 2
    with pytest.raises(ConfigError, match="cannot read the configuration"):
        load_config(str(tmp_path / "missing.yaml"), {}, apart=True)


def _comparable(config: object) -> object:
    """A configuration as values: plugins' settings compare by identity."""
    assert isinstance(config, Config)
    plugins = {name: (settings.position, plain_settings(settings)) for name, settings in config.plugins.items()}
    return replace(config, plugins=MappingProxyType({})), plugins


def _in_place(call: Callable[[], object]) -> object:
    """``call`` with the module's real parse_file, whatever a fixture put there."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_source, "parse_file", _REAL_PARSE)
        return call()


def test_a_child_that_dies_or_a_fork_that_fails_means_a_parse_in_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _write(tmp_path, DOCUMENTS["full"])
    expected = _shape(_source.parse_file(path, {})[0], {})
    parent = os.getpid()
    parsed_here: list[bool] = []

    def dying(p: str, e: dict[str, str]) -> object:
        if os.getpid() != parent:
            os._exit(3)
        parsed_here.append(True)
        return _REAL_PARSE(p, e)

    monkeypatch.setattr(_source, "parse_file", dying)
    assert _shape(_apart.parse_file_apart(path, {})[0], {}) == expected
    assert parsed_here == [True]

    def no_fork() -> int:
        raise OSError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(os, "fork", no_fork)
    assert _shape(_apart.parse_file_apart(path, {})[0], {}) == expected
    assert parsed_here == [True, True]


def test_other_threads_running_mean_a_parse_in_place(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _write(tmp_path, DOCUMENTS["full"])

    def no_fork() -> int:
        raise AssertionError("forked while another thread ran")

    monkeypatch.setattr(os, "fork", no_fork)
    release = threading.Event()
    other = threading.Thread(target=release.wait)
    other.start()
    try:
        root, problems = _apart.parse_file_apart(path, {})
    finally:
        release.set()
        other.join()
    assert root is not None and problems == []


def test_the_parent_never_imports_pyyaml(tmp_path: Path) -> None:
    path = _write(tmp_path, DOCUMENTS["full"])
    script = (
        "import sys\n"
        "from supervisor.config import load_config\n"
        f"config = load_config({path!r}, {{}}, apart=True)\n"
        "print([p.name for p in config.processes])\n"
        "print(sorted(m for m in ('yaml', '_yaml', 'datetime', 'base64') if m in sys.modules))\n"
    )
    result = subprocess.run([sys.executable, "-I", "-c", script], capture_output=True, text=True, check=True)
    assert result.stdout.splitlines() == ["['web', 'worker']", "[]"]
