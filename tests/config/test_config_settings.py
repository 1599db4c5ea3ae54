"""Settings: how plugins read their sections, with every problem positioned."""

from __future__ import annotations

import signal
from collections.abc import Callable

import pytest

from supervisor.config import Position, Settings, load_config

WriteFile = Callable[[str], str]  # the `write` fixture
Section = Callable[[str], Settings]


@pytest.fixture
def section(write: WriteFile) -> Section:
    """The settings of plugin ``p`` from YAML written under ``plugins: {p: ...}``."""

    def make(body: str) -> Settings:
        indented = "\n".join("    " + line for line in body.strip("\n").splitlines())
        path = write(f"plugins:\n  p:\n{indented}\n")
        return load_config(path, {"HOST": "db"}).plugins["p"]

    return make


def messages(settings: Settings) -> list[str]:
    return [f"{p.position.line}:{p.position.column}: {p.message}" for p in settings.problems if p.position]


def test_valid_values_are_read(section: Section) -> None:
    s = section(
        """
        name: sleep
        level: high
        enabled: true
        count: 3
        ratio: 0.5
        whole: 2
        delay: 1.5s
        plain_seconds: 30
        sig: USR1
        sig_number: 15
        tags: [a, 1, yes]
        one_tag: solo
        argv: curl -fsS "http://${HOST}/drain"
        argv_list: [curl, -fsS]
        labels: {app: web, replicas: 3, canary: false}
        nested: {inner: 5s}
        items: [{cmd: a}, {cmd: b}]
        """
    )
    assert s.string("name") == "sleep"
    assert s.string("level", choices=["low", "high"]) == "high"
    assert s.boolean("enabled") is True
    assert s.integer("count", minimum=1, maximum=5) == 3
    assert s.number("ratio", minimum=0) == 0.5
    assert s.number("whole") == 2.0
    assert s.duration("delay") == 1.5
    assert s.duration("plain_seconds") == 30.0
    assert s.signal("sig", signal.SIGTERM) == signal.SIGUSR1
    assert s.signal("sig_number", signal.SIGINT) == 15
    assert s.string_list("tags") == ("a", "1", "yes")
    assert s.string_list("one_tag") == ("solo",)
    assert s.command("argv") == ("curl", "-fsS", "http://db/drain")
    assert s.command("argv_list") == ("curl", "-fsS")
    assert s.mapping("labels") == {"app": "web", "replicas": "3", "canary": "false"}
    nested = s.section("nested")
    assert nested is not None and nested.duration("inner") == 5.0
    assert nested.path == "plugins.p.nested"
    assert [item.string("cmd") for item in s.sections("items")] == ["a", "b"]
    assert s.raw("labels") == {"app": "web", "replicas": 3, "canary": False}
    assert s.problems == []


def test_missing_and_null_keys_give_the_default(section: Section) -> None:
    s = section("present: null")
    assert s.string("absent") is None
    assert s.string("present", "d") == "d"
    assert s.boolean("absent", True) is True
    assert s.integer("absent", 7) == 7
    assert s.number("absent", 1.5) == 1.5
    assert s.duration("absent", 2.0) == 2.0
    assert s.signal("absent", 9) == 9
    assert s.string_list("absent", ["x"]) == ("x",)
    assert s.command("absent") is None
    assert s.mapping("absent") == {}
    assert s.section("absent") is None
    assert s.sections("absent") == []
    assert s.raw("absent", "dflt") == "dflt"
    assert s.raw("present", "dflt") is None
    assert "present" in s and "absent" not in s
    assert s.problems == []


def test_required_keys(section: Section) -> None:
    s = section("empty:\nother: 1")
    assert s.string("name", required=True) is None
    assert s.duration("empty", required=True) is None
    assert s.command("argv", required=True) is None
    assert s.section("sub", required=True) is None
    assert messages(s) == [
        "3:5: plugins.p: missing required key 'name'",
        "3:11: plugins.p.empty: a value is required",
        "3:5: plugins.p: missing required key 'argv'",
        "3:5: plugins.p: missing required key 'sub'",
    ]


@pytest.mark.parametrize(
    ("call", "value", "message"),
    [
        (lambda s: s.string("k", "d"), "[1]", "plugins.p.k: expected a string, got a list"),
        (
            lambda s: s.string("k", "d"),
            "yes",
            "plugins.p.k: expected a string, got true (quote it: 'yes')",
        ),
        (
            lambda s: s.string("k", "d", choices=["a", "b"]),
            "c",
            "plugins.p.k: expected one of a, b, got 'c'",
        ),
        (lambda s: s.boolean("k"), "'true'", "plugins.p.k: expected true or false, got 'true'"),
        (lambda s: s.integer("k", 0), "1.5", "plugins.p.k: expected a whole number, got 1.5"),
        (lambda s: s.integer("k", 0), "'3'", "plugins.p.k: expected a whole number, got '3'"),
        (lambda s: s.integer("k", 0, minimum=1), "0", "plugins.p.k: must be at least 1, got 0"),
        (lambda s: s.integer("k", 0, maximum=9), "10", "plugins.p.k: must be at most 9, got 10"),
        (lambda s: s.number("k", 0.0), "fast", "plugins.p.k: expected a number, got 'fast'"),
        (lambda s: s.number("k", 0.0), ".nan", "plugins.p.k: expected a finite number, got .nan"),
        (lambda s: s.number("k", 0.0, minimum=0), "-2", "plugins.p.k: must be at least 0, got -2"),
        (
            lambda s: s.duration("k", 1.0),
            "abc",
            "plugins.p.k: invalid duration 'abc': use a number of seconds or a number with "
            "ms, s, m or h (30, 30s, 500ms, 1.5s, 2m)",
        ),
        (
            lambda s: s.duration("k", 1.0),
            "true",
            "plugins.p.k: expected a duration such as 30s or 500ms, got true",
        ),
        (lambda s: s.signal("k", 15), "SIGNOPE", "plugins.p.k: unknown signal 'SIGNOPE'"),
        (lambda s: s.signal("k", 15), "0", "plugins.p.k: invalid signal number 0: use 1-31"),
        (lambda s: s.string_list("k"), "[a, [b]]", "plugins.p.k[1]: expected a string, got a list"),
        (lambda s: s.command("k"), "''", "plugins.p.k: the command is empty"),
        (
            lambda s: s.mapping("k"),
            "[a]",
            "plugins.p.k: expected a mapping of names to strings, got a list",
        ),
        (lambda s: s.mapping("k"), "{a: [1]}", "plugins.p.k.a: expected a string, got a list"),
        (
            lambda s: s.mapping("k"),
            "{a: }",
            "plugins.p.k.a: expected a string, got null (write '' for an empty",
        ),
        (lambda s: s.section("k"), "5", "plugins.p.k: expected a mapping, got 5"),
        (lambda s: s.sections("k"), "[{a: 1}, 2]", "plugins.p.k[1]: expected a mapping, got 2"),
        (lambda s: s.sections("k"), "text", "plugins.p.k: expected a list of mappings, got 'text'"),
    ],
)
def test_wrong_values_are_recorded_with_their_position(
    section: Section, call: Callable[[Settings], object], value: str, message: str
) -> None:

    s = section(f"other: 1\nk: {value}")
    call(s)
    assert len(s.problems) == 1
    problem = s.problems[0]
    assert problem.position is not None and problem.position.line == 4
    assert problem.message.startswith(message)


def test_wrong_values_keep_the_default_and_keep_reading(section: Section) -> None:
    s = section("a: x\nb: y\nc: 2s")
    assert s.integer("a", 1) == 1
    assert s.boolean("b", True) is True
    assert s.duration("c") == 2.0
    assert [p.position.line for p in s.problems if p.position] == [3, 4]


def test_check_keys_suggests_and_allows_hook_timeout(section: Section) -> None:
    s = section("propagation_dely: 5s\nhook_timeout: 10s\ncompletely_else: 1")
    s.check_keys(["propagation_delay", "endpoint"])
    assert messages(s) == [
        "3:5: unknown key 'propagation_dely' in plugins.p (did you mean 'propagation_delay'?)",
        "5:5: unknown key 'completely_else' in plugins.p (expected one of: endpoint, hook_timeout, propagation_delay)",
    ]


def test_nested_sections_share_problems_and_do_not_reserve_hook_timeout(section: Section) -> None:
    s = section("drain:\n  hook_timeout: 1s\n  dealy: 2s\nexec: [{cmd: x, bad: 1}]")
    drain = s.section("drain")
    assert drain is not None
    drain.check_keys(["delay"])
    (command,) = s.sections("exec")
    command.check_keys(["cmd"])
    assert command.path == "plugins.p.exec[0]"
    assert [p.message for p in s.problems] == [
        "unknown key 'hook_timeout' in plugins.p.drain (expected one of: delay)",
        "unknown key 'dealy' in plugins.p.drain (did you mean 'delay'?)",
        "unknown key 'bad' in plugins.p.exec[0] (expected one of: cmd)",
    ]
    assert s.problems is drain.problems is command.problems


def test_error_and_positions(section: Section) -> None:
    s = section("endpoint: http://x\nprocess: ghost")
    assert s.position is not None and (s.position.line, s.position.column) == (3, 5)
    assert s.position_of("process") == Position(s.position.file, 4, 14)
    assert s.position_of("missing") == s.position
    assert s.keys() == ["endpoint", "process"]
    s.error("process", "no process named 'ghost'")
    s.error(None, "needs an endpoint or a process, not both")
    assert messages(s) == [
        "4:14: plugins.p.process: no process named 'ghost'",
        "3:5: plugins.p: needs an endpoint or a process, not both",
    ]


def test_from_mapping_for_tests_and_embedders() -> None:
    s = Settings.from_mapping({"delay": "2s", "cmd": ["a", "b"], "n": 3}, path="plugins.sleep")
    assert s.duration("delay") == 2.0
    assert s.command("cmd") == ("a", "b")
    assert s.integer("n") == 3
    s.check_keys(["delay"])
    assert [p.message for p in s.problems] == [
        "unknown key 'cmd' in plugins.sleep (expected one of: delay, hook_timeout)",
        "unknown key 'n' in plugins.sleep (expected one of: delay, hook_timeout)",
    ]


def test_empty_plugin_section_has_a_position(write: WriteFile) -> None:
    path = write("plugins:\n  kubernetes:\n  sleep: {}\n")
    plugins = load_config(path, {}).plugins
    assert plugins["kubernetes"].keys() == [] and plugins["kubernetes"].position is not None
    assert plugins["kubernetes"].path == "plugins.kubernetes"
    assert plugins["sleep"].position == Position(path, 3, 10)
