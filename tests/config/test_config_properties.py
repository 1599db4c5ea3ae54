"""Property tests: whatever a file holds, load_config raises only ConfigError.

Also for plugins: whatever a section holds, Settings' readers only record
problems.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from supervisor.config import (
    Config,
    ConfigError,
    Settings,
    budget_problems,
    load_config,
    render_plan,
    start_levels,
)

_counter = itertools.count()

# Scalars that exercise every branch: YAML 1.1 booleans, huge and special
# numbers, durations, signals, references, control and NUL characters.
TRICKY_STRINGS = st.sampled_from(
    [
        "", " ", "yes", "no", "on", "null", "~", "0x1F", "1e400", "-1", "1:30", "30s", "500ms",
        "SIGTERM", "TERM", "sigkill", "64", "0", "${X}", "${X:-1}", "${UNSET}", "$$", "${", "$",
        "a\0b", "all", "net_bind_service", "127.0.0.1:8080", "[::1]:1", "http://x/", "ftp://x",
        "root", "65532", "nobody-here", "on-failure", "always", "json", "debug", "a -> b",
        "echo 'x", "2024-01-01", "<<", "=", "a" * 300, "\u2028", "é", "\t",
    ]
)  # fmt: skip
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
    TRICKY_STRINGS,
)
VALUES = st.recursive(
    SCALARS,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(st.one_of(TRICKY_STRINGS, st.text(max_size=8)), children, max_size=4),
    ),
    max_leaves=12,
)

PROCESS_KEYS = [
    "name", "command", "depends_on", "main", "env", "cwd", "user", "group", "no_new_privs",
    "capabilities", "restart", "backoff", "on_failure", "stop_signal", "stop_timeout",
    "process_group", "ready", "log_prefix",
]  # fmt: skip
NESTED_KEYS = {
    "ready": ["socket", "tcp", "http", "exec", "file", "after", "timeout", "interval"],
    "backoff": ["initial", "max", "max_restarts", "window"],
    "capabilities": ["drop", "keep"],
}
ENVIRON = {"X": "1", "EMPTY": ""}


# No example database: the tests leave no files behind.
FAST = {"deadline": None, "database": None, "suppress_health_check": [HealthCheck.too_slow]}


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("property")


def _load_bytes(folder: Path, data: bytes) -> Config | None:
    path = folder / f"case-{next(_counter)}.yaml"
    path.write_bytes(data)
    try:
        config = load_config(str(path), ENVIRON)
    except ConfigError as exc:
        assert exc.problems, "a ConfigError names at least one problem"
        for line in str(exc).splitlines():
            assert line.startswith(f"{path}:"), line
        return None
    finally:
        path.unlink()
    # A valid configuration can be ordered, budget-checked and rendered.
    start_levels(config)
    budget_problems(config)
    render_plan(config, {"pre_stop": ["x"], "after_process_stop": ["y"]})
    return config


def _dump(document: object) -> bytes:
    return yaml.safe_dump(document, allow_unicode=True).encode()


@settings(max_examples=300, **FAST)
@given(st.binary(max_size=200))
def test_arbitrary_bytes(folder: Path, data: bytes) -> None:
    _load_bytes(folder, data)


HUGE = "9" * 5000  # past int's default str() limit of 4300 digits


@pytest.mark.parametrize(
    ("document", "message"),
    [
        (f"grace_period: {HUGE}", ":1:15: grace_period: the number 99999"),
        (
            f"processes: [{{name: a, command: x, stop_signal: {HUGE}}}]",
            ":1:48: processes[0].stop_signal: the number 99999",
        ),
        (f"processes: [{{name: a, command: [x, {HUGE}]}}]", ":1:36: processes[0].command[1]: the number"),
        (
            f"processes: [{{name: a, command: x, user: -{HUGE}}}]",
            ":1:41: processes[0].user: the number -9999",
        ),
        (f"plugins: {{p: {{n: {HUGE}}}}}", ":1:18: plugins.p.n: the number 999"),
        (f"{HUGE}: 1", ":1:5001: invalid YAML: mapping values are not allowed here"),
        ("grace_period: 1.0e+999999", ":1:15: grace_period: a duration must be a finite number"),
        ("grace_period: !!int 1e3", ":1:15: grace_period: invalid value '1e3' for the tag !!int"),
    ],
)
def test_huge_numbers(folder: Path, document: str, message: str) -> None:
    path = folder / "huge.yaml"
    path.write_text(document)
    with pytest.raises(ConfigError) as caught:
        load_config(str(path), {})
    assert len(caught.value.problems) == 1
    assert message in str(caught.value)
    path.unlink()


YAML_TOKENS = st.sampled_from(
    [
        "processes:", "\n", "\n  ", "\n    ", "- ", "name: ", "command: ", "depends_on: ",
        "[", "]", "{", "}", ", ", ": ", "&a ", "*a", "<<: ", "!!str ", "!!set ", "!tag ", "? ",
        "a", "b", "'q'", '"d"', "${X}", "${U}", "---", "...", "#c", "|", ">", "-1", "1e9",
        "ready: ", "socket: /s", "main: true", "plugins:", "grace_period: ", "30s", "null",
    ]
)  # fmt: skip


@settings(max_examples=400, **FAST)
@given(st.lists(YAML_TOKENS, max_size=40).map("".join))
def test_arbitrary_yaml_like_text(folder: Path, text: str) -> None:
    _load_bytes(folder, text.encode())


@settings(max_examples=200, **FAST)
@given(VALUES)
def test_arbitrary_document(folder: Path, document: object) -> None:
    _load_bytes(folder, _dump(document))


@settings(max_examples=300, **FAST)
@given(st.sampled_from(["grace_period", "log", "processes", "plugins"]), VALUES)
def test_arbitrary_top_level_value(folder: Path, key: str, value: object) -> None:
    _load_bytes(folder, _dump({key: value}))


@settings(max_examples=600, **FAST)
@given(st.sampled_from(PROCESS_KEYS), VALUES, st.booleans())
def test_arbitrary_process_value(folder: Path, key: str, value: object, second: bool) -> None:
    process = {"name": "a", "command": ["x"], key: value}
    processes = [process, {"name": "b", "command": "y", "depends_on": ["a"]}] if second else [process]
    _load_bytes(folder, _dump({"processes": processes}))


@settings(max_examples=400, **FAST)
@given(
    st.sampled_from([(section, key) for section, keys in NESTED_KEYS.items() for key in keys]),
    VALUES,
)
def test_arbitrary_nested_value(folder: Path, where: tuple[str, str], value: object) -> None:
    section, key = where
    _load_bytes(folder, _dump({"processes": [{"name": "a", "command": "x", section: {key: value}}]}))


@settings(max_examples=200, **FAST)
@given(st.sampled_from(["format", "level"]), VALUES)
def test_arbitrary_log_value(folder: Path, key: str, value: object) -> None:
    _load_bytes(folder, _dump({"log": {key: value}}))


@settings(max_examples=300, **FAST)
@given(VALUES)
def test_settings_readers_never_raise(folder: Path, value: object) -> None:
    config = _load_bytes(folder, _dump({"plugins": {"p": {"k": value, "n": {"k": value}}}}))
    if config is None:  # a bad ${...} reference is reported when the file is loaded
        return
    section = config.plugins["p"]
    section.raw("k")
    section.string("k")
    section.string("k", "d", choices=["a", "b"])
    section.boolean("k")
    section.integer("k", minimum=0, maximum=10)
    section.number("k", minimum=0.5)
    section.duration("k")
    section.signal("k", 15)
    section.string_list("k")
    section.command("k")
    section.mapping("k")
    section.check_keys(["n"])
    for nested in [section.section("k"), section.section("n"), *section.sections("k")]:
        if nested is not None:
            nested.check_keys(["x"])
            nested.duration("k")
    assert isinstance(section, Settings)
    for problem in section.problems:
        assert problem.position is not None
        assert "plugins.p" in problem.message


@st.composite
def dependency_graphs(draw: st.DrawFn) -> list[dict[str, object]]:
    """Valid process lists: each process depends only on processes listed before it."""
    count = draw(st.integers(min_value=1, max_value=8))
    names = [f"p{i}" for i in range(count)]
    processes: list[dict[str, object]] = []
    for index, name in enumerate(names):
        deps = draw(st.lists(st.sampled_from(names[:index]), unique=True)) if index else []
        timeout = draw(st.one_of(st.none(), st.integers(min_value=0, max_value=20)))
        process: dict[str, object] = {"name": name, "command": ["x"], "depends_on": deps}
        if timeout is not None:
            process["stop_timeout"] = f"{timeout}s"
        processes.append(process)
    order = draw(st.permutations(processes))
    return list(order)


@settings(max_examples=150, **FAST)
@given(dependency_graphs(), st.integers(min_value=1, max_value=100))
def test_levels_respect_dependencies(folder: Path, processes: list[dict[str, object]], grace: int) -> None:
    config = _load_bytes(folder, _dump({"grace_period": grace, "processes": processes}))
    assert config is not None
    levels = start_levels(config)
    level_of = {p.name: number for number, level in enumerate(levels) for p in level}
    file_order = [p.name for p in config.processes]
    for number, level in enumerate(levels):
        assert level, "no empty level"
        names = [p.name for p in level]
        assert names == sorted(names, key=file_order.index), "file order within a level"
        for process in level:
            assert all(level_of[dep] < number for dep in process.depends_on)
            if number:
                assert any(level_of[dep] == number - 1 for dep in process.depends_on), "as early as possible"
    worst = sum(max((p.stop_timeout or 0.0) for p in level) for level in levels)
    assert bool(budget_problems(config)) == (worst > grace)
