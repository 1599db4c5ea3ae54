"""Malformed files: each problem as FILE:LINE:COLUMN: message, all at once."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from supervisor.config import ConfigError, load_config

Problems = Callable[..., list[str]]  # the `problems` fixture
WriteFile = Callable[[str], str]  # the `write` fixture


# (YAML, "LINE:COLUMN", fragment of the message).  Each file has exactly one
# problem, so that a checker reporting a follow-on problem fails too.
MALFORMED = {
    "unknown top-level key": (
        """
        grace_period: 30s
        procesess: []
        """,
        "2:1",
        "unknown key 'procesess' (did you mean 'processes'?)",
    ),
    "unknown process key": (
        """
        processes:
          - name: a
            command: x
            stop_timout: 5s
        """,
        "4:5",
        "unknown key 'stop_timout' in processes[0] (did you mean 'stop_timeout'?)",
    ),
    "unknown signal": (
        """
        processes:
          - name: a
            command: x
          - name: b
            command: y
            stop_signal: SIGFOO
        """,
        "6:18",
        "processes[1].stop_signal: unknown signal 'SIGFOO': use a name such as TERM or SIGUSR1, or a number",
    ),
    "signal number out of range": (
        "processes: [{name: a, command: x, stop_signal: 64}]",
        "1:48",
        "processes[0].stop_signal: invalid signal number 64",
    ),
    "SIGSTOP as stop signal": (
        "processes: [{name: a, command: x, stop_signal: STOP}]",
        "1:48",
        "processes[0].stop_signal: SIGSTOP pauses a process instead of stopping it",
    ),
    "bad duration": (
        "grace_period: 30 seconds",
        "1:15",
        "grace_period: invalid duration '30 seconds'",
    ),
    "negative duration": (
        "processes: [{name: a, command: x, stop_timeout: -1}]",
        "1:49",
        "processes[0].stop_timeout: a duration must be a finite number >= 0",
    ),
    "infinite duration": (
        "grace_period: .inf",
        "1:15",
        "grace_period: a duration must be a finite number",
    ),
    "missing name": (
        """
        processes:
          - command: x
        """,
        "2:5",
        "processes[0]: missing required key 'name'",
    ),
    "missing command": (
        """
        processes:
          - name: a
        """,
        "2:5",
        "processes[0]: missing required key 'command'",
    ),
    "empty command list": (
        """
        processes:
          - name: a
            command: []
        """,
        "3:14",
        "processes[0].command: the command is empty",
    ),
    "blank command string": (
        """
        processes:
          - name: a
            command: "   "
        """,
        "3:14",
        "processes[0].command: the command is empty",
    ),
    "command of the wrong type": (
        """
        processes:
          - name: a
            command: {run: x}
        """,
        "3:14",
        "processes[0].command: expected a command (a list of strings, or a string), got a mapping",
    ),
    "nested list in a command": (
        """
        processes:
          - name: a
            command: [x, [y]]
        """,
        "3:18",
        "processes[0].command[1]: expected a string (one argument), got a list",
    ),
    "unbalanced quote in a command": (
        """
        processes:
          - name: a
            command: echo 'hi
        """,
        "3:14",
        "processes[0].command: cannot split the command line: No closing quotation",
    ),
    "invalid name": (
        """
        processes:
          - name: Web_1
            command: x
        """,
        "2:11",
        "processes[0].name: invalid name 'Web_1': use lower-case letters, digits and -",
    ),
    "duplicate name": (
        """
        processes:
          - name: a
            command: x
          - name: a
            command: y
        """,
        "4:11",
        "processes[1].name: duplicate process name 'a': already used (line 2)",
    ),
    "two mains": (
        """
        processes:
          - {name: a, command: x, main: true}
          - {name: b, command: y, main: true}
        """,
        "3:33",
        "processes[1].main: only one process can be main: 'a' already is (line 2)",
    ),
    "unknown dependency": (
        """
        processes:
          - name: a
            command: x
            depends_on: [b]
        """,
        "4:17",
        "processes[0].depends_on: unknown process 'b'",
    ),
    "dependency on itself": (
        """
        processes:
          - name: a
            command: x
            depends_on: a
        """,
        "4:17",
        "processes[0].depends_on: 'a' cannot depend on itself",
    ),
    "dependency cycle": (
        """
        processes:
          - name: a
            command: x
            depends_on: [b]
          - name: b
            command: y
            depends_on: [a]
        """,
        "4:17",
        "processes[0].depends_on: dependency cycle: a -> b -> a",
    ),
    "longer dependency cycle": (
        """
        processes:
          - {name: x, command: x}
          - {name: a, command: x, depends_on: [c, x]}
          - {name: b, command: x, depends_on: [a]}
          - {name: c, command: x, depends_on: [b]}
        """,
        "3:39",
        "processes[1].depends_on: dependency cycle: a -> c -> b -> a",
    ),
    "undefined variable": (
        """
        processes:
          - name: a
            command: x
            env: {LEVEL: "${LOG_LEVEL}"}
        """,
        "4:18",
        "processes[0].env.LEVEL: environment variable LOG_LEVEL is not set and ${LOG_LEVEL} has no default",
    ),
    "required variable with a message": (
        """
        processes:
          - name: a
            command: "run ${TOKEN:?give the API token}"
        """,
        "3:14",
        "processes[0].command: environment variable TOKEN is required: give the API token",
    ),
    "malformed variable reference": (
        """
        processes:
          - name: a
            command: "echo ${1abc}"
        """,
        "3:14",
        "processes[0].command: invalid variable reference",
    ),
    "unknown user": (
        """
        processes:
          - name: a
            command: x
            user: no-such-user-here
        """,
        "4:11",
        "processes[0].user: unknown user 'no-such-user-here'",
    ),
    "unknown group": (
        """
        processes:
          - name: a
            command: x
            group: no-such-group-here
        """,
        "4:12",
        "processes[0].group: unknown group 'no-such-group-here'",
    ),
    "restart policy": (
        """
        processes:
          - name: a
            command: x
            restart: sometimes
        """,
        "4:14",
        "processes[0].restart: expected one of never, on-failure, always, got 'sometimes'",
    ),
    "restart: no is a boolean in YAML": (
        "processes: [{name: a, command: x, restart: no}]",
        "1:44",
        "processes[0].restart: expected one of never, on-failure, always, got false",
    ),
    "on_failure policy": (
        "processes: [{name: a, command: x, on_failure: restart}]",
        "1:47",
        "processes[0].on_failure: expected one of shutdown, ignore, got 'restart'",
    ),
    "boolean expected": (
        "processes: [{name: a, command: x, main: 'yes'}]",
        "1:41",
        "processes[0].main: expected true or false, got 'yes'",
    ),
    "two ready checks": (
        """
        processes:
          - name: a
            command: x
            ready: {socket: /s, tcp: "127.0.0.1:1"}
        """,
        "4:25",
        "processes[0].ready: only one check per process, got socket and tcp",
    ),
    "no ready check": (
        """
        processes:
          - name: a
            command: x
            ready: {timeout: 5s}
        """,
        "4:12",
        "processes[0].ready: needs one of socket, tcp, http, exec, file, after",
    ),
    "bad tcp address": (
        """
        processes:
          - name: a
            command: x
            ready: {tcp: "localhost"}
        """,
        "4:18",
        "processes[0].ready.tcp: expected host:port",
    ),
    "tcp port out of range": (
        """
        processes:
          - name: a
            command: x
            ready: {tcp: "127.0.0.1:70000"}
        """,
        "4:18",
        "processes[0].ready.tcp: port 70000 is out of range 1-65535",
    ),
    "bad http url": (
        """
        processes:
          - name: a
            command: x
            ready: {http: "ftp://example/"}
        """,
        "4:19",
        "processes[0].ready.http: expected an http:// or https:// URL",
    ),
    "ready after longer than its timeout": (
        """
        processes:
          - name: a
            command: x
            ready: {after: 2m}
        """,
        "4:20",
        "processes[0].ready.after: must be shorter than timeout (60s), or raise timeout",
    ),
    "ready interval zero": (
        """
        processes:
          - name: a
            command: x
            ready: {file: /r, interval: 0}
        """,
        "4:33",
        "processes[0].ready.interval: must be greater than 0",
    ),
    "backoff max below initial": (
        """
        processes:
          - name: a
            command: x
            backoff: {initial: 10s, max: 1s}
        """,
        "4:34",
        "processes[0].backoff.max: must be at least initial (10s), got 1s",
    ),
    "negative max_restarts": (
        """
        processes:
          - name: a
            command: x
            backoff:
              max_restarts: -1
        """,
        "5:21",
        "processes[0].backoff.max_restarts: must be at least 0, got -1",
    ),
    "unknown capability": (
        """
        processes:
          - name: a
            command: x
            capabilities: {keep: [NET_BIND_SERVIC]}
        """,
        "4:26",
        "processes[0].capabilities.keep: unknown capability 'NET_BIND_SERVIC' (did you mean NET_BIND_SERVICE?)",
    ),
    "log format": (
        "log: {format: xml}",
        "1:15",
        "log.format: expected one of text, json, got 'xml'",
    ),
    "log level": (
        """
        log:
          level: verbose
        """,
        "2:10",
        "log.level: expected one of debug, info, warning, error, got 'verbose'",
    ),
    "processes as a mapping": (
        """
        processes:
          web: {command: x}
        """,
        "2:3",
        "processes: expected a list of processes, each written `- name: ...`, got a mapping",
    ),
    "process entry not a mapping": (
        """
        processes:
          - web
        """,
        "2:5",
        "processes[0]: expected a mapping, got 'web'",
    ),
    "plugins not a mapping": (
        "plugins: [kubernetes]",
        "1:10",
        "plugins: expected a mapping of plugin names to their settings, got a list",
    ),
    "plugin settings not a mapping": (
        """
        plugins:
          sleep: 5s
        """,
        "2:10",
        "plugins.sleep: expected a mapping of settings ({} for none), got '5s'",
    ),
    "duplicate key": (
        """
        processes:
          - name: a
            command: x
            name: b
        """,
        "4:5",
        "processes[0]: duplicate key 'name' (first at line 2)",
    ),
    "non-string key": (
        """
        processes:
          - name: a
            command: x
            env: {1: one}
        """,
        "4:11",
        "processes[0].env: a key must be a string, got 1: quote it ('1')",
    ),
    "boolean key": (
        "yes: 1",
        "1:1",
        "a key must be a string, got true: quote it ('yes')",
    ),
    "python object tag": (
        """
        processes:
          - name: a
            command: !!python/object/apply:os.system ["echo pwned"]
        """,
        "3:14",
        "processes[0].command: the tag !!python/object/apply:os.system is not supported",
    ),
    "custom tag": (
        "grace_period: !duration 30s",
        "1:15",
        "grace_period: the tag !duration is not supported",
    ),
    "set tag": (
        "processes: !!set {a, b}",
        "1:12",
        "processes: the tag !!set is not supported",
    ),
    "invalid int tag value": (
        "grace_period: !!int thirty",
        "1:15",
        "grace_period: invalid value 'thirty' for the tag !!int",
    ),
    "recursive alias": (
        "processes: &p [*p]",
        "1:12",
        "processes[0]: an alias refers to a node that contains it",
    ),
    "merge of a scalar": (
        """
        processes:
          - <<: 5
            name: a
            command: x
        """,
        "2:9",
        "processes[0]: a merge key (<<) takes mappings, got a number",
    ),
    "invalid YAML: bad indentation": (
        """
        processes:
          - name: a
           command: x
        """,
        "3:4",
        "invalid YAML: expected <block end>, but found '<block mapping start>' (while parsing a block collection)",
    ),
    "invalid YAML: unclosed flow": (
        "processes: [{name: a, command: x}\n",
        "2:1",
        "invalid YAML: expected ',' or ']', but got '<stream end>'",
    ),
    "invalid YAML: tab indentation": (
        "processes:\n\t- name: a\n",
        "2:1",
        "invalid YAML: found character '\\t' that cannot start any token",
    ),
    "invalid YAML: undefined alias": (
        "grace_period: *nope",
        "1:15",
        "invalid YAML: found undefined alias 'nope'",
    ),
    "invalid YAML: two documents": (
        "grace_period: 1s\n---\ngrace_period: 2s\n",
        "2:1",
        "invalid YAML: expected a single document in the stream, but found another document",
    ),
    "invalid YAML: unquoted reference in a flow mapping": (
        """
        processes:
          - name: a
            command: x
            env: {LEVEL: ${LOG_LEVEL}}
        """,
        "4:19",
        "invalid YAML: expected ',' or '}', but got '{' (while parsing a flow mapping); "
        "quote values that contain ${...}",
    ),
    "control character": (
        "grace_period: 1s\nlog: {format: \x01}\n",
        "2:15",
        "invalid YAML: the character U+0001 is not allowed",
    ),
    "empty file": ("", "1:1", "the configuration is empty"),
    "only comments": ("# nothing here\n", "1:1", "the configuration is empty"),
    "explicit null document": ("null\n", "1:1", "the configuration is empty"),
    "top level is a list": (
        "- name: a\n  command: x\n",
        "1:1",
        "the top level must be a mapping with keys such as processes: and grace_period:, got a list",
    ),
    "top level is a string": (
        "just some text\n",
        "1:1",
        "the top level must be a mapping",
    ),
}


@pytest.mark.parametrize(("text", "where", "fragment"), MALFORMED.values(), ids=MALFORMED.keys())
def test_malformed_file(problems: Problems, text: str, where: str, fragment: str) -> None:
    lines = problems(text)
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"deploy.yaml:{where}: "), lines[0]
    assert fragment in lines[0]


def test_every_problem_is_reported_at_once(problems: Problems) -> None:
    lines = problems(
        """
        grace_period: soon
        processes:
          - name: a
            command: []
            stop_signal: SIGNOPE
          - name: b
            command: x
            depends_on: [zzz]
            env: {A: "${UNSET}"}
        plugins:
          sleep: 3
        """
    )
    assert [line.split(": ")[0] for line in lines] == [
        "deploy.yaml:1:15",
        "deploy.yaml:4:14",
        "deploy.yaml:5:18",
        "deploy.yaml:8:17",
        "deploy.yaml:9:14",
        "deploy.yaml:11:10",
    ]


def test_a_bad_process_does_not_cause_follow_on_problems(problems: Problems) -> None:
    # b's command is wrong, but b exists: a's depends_on is fine.
    lines = problems(
        """
        processes:
          - {name: a, command: x, depends_on: [b]}
          - {name: b, command: []}
        """
    )
    assert len(lines) == 1 and "processes[1].command" in lines[0]


def test_missing_file() -> None:
    with pytest.raises(ConfigError) as caught:
        load_config("/nonexistent/deploy.yaml", {})
    assert str(caught.value) == ("/nonexistent/deploy.yaml: cannot read the configuration: No such file or directory")


def test_nul_in_the_path() -> None:
    with pytest.raises(ConfigError) as caught:
        load_config("deploy\0.yaml", {})
    assert "cannot read the configuration: embedded null byte" in str(caught.value)


def test_endless_file_is_refused() -> None:
    with pytest.raises(ConfigError) as caught:
        load_config("/dev/zero", {})
    assert str(caught.value) == ("/dev/zero: the configuration is larger than 16 MiB; is it the right file?")


def test_directory_instead_of_a_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(str(tmp_path), {})
    assert str(caught.value) == f"{tmp_path}: cannot read the configuration: Is a directory"


def test_file_without_permission(tmp_path: Path) -> None:
    path = tmp_path / "secret.yaml"
    path.write_text("grace_period: 1s\n")
    path.chmod(0)
    if os.access(path, os.R_OK):  # root reads anything: use a FIFO-free path instead
        path = tmp_path / "missing-dir" / "deploy.yaml"
        expected = "No such file or directory"
    else:
        expected = "Permission denied"
    with pytest.raises(ConfigError) as caught:
        load_config(str(path), {})
    assert str(caught.value) == f"{path}: cannot read the configuration: {expected}"


def test_invalid_utf8_points_at_the_byte(tmp_path: Path) -> None:
    path = tmp_path / "latin1.yaml"
    path.write_bytes("processes:\n  - name: café\n".encode("latin-1"))
    with pytest.raises(ConfigError) as caught:
        load_config(str(path), {})
    assert str(caught.value) == (f"{path}:2:14: the file is not valid UTF-8 text (byte 0xe9); save it as UTF-8")


@pytest.mark.parametrize("recursion_limit", [1000, 100_000])
def test_deep_nesting_is_a_config_error_whatever_the_recursion_limit(write: WriteFile, recursion_limit: int) -> None:
    # The limit is the file's, not the interpreter's: a test framework (or
    # an embedder) that raised the recursion limit once made this document
    # parse, and the error became "expected a mapping".
    path = write("processes: " + "[" * 5000 + "]" * 5000)
    previous = sys.getrecursionlimit()
    sys.setrecursionlimit(recursion_limit)
    try:
        with pytest.raises(ConfigError) as caught:
            load_config(path, {})
    finally:
        sys.setrecursionlimit(previous)
    assert str(caught.value) == f"{path}:1:111: invalid YAML: collections nested more than 100 levels deep"


def test_nesting_up_to_the_limit_is_read(write: WriteFile) -> None:
    path = write("processes: " + "[" * 99 + "]" * 99)
    with pytest.raises(ConfigError) as caught:
        load_config(path, {})
    assert "processes[0]: expected a mapping, got a list" in str(caught.value)


def test_billion_laughs_is_cheap_and_rejected(write: WriteFile) -> None:
    lines = ["a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 10)]
    body = "plugins:\n" + "\n".join("  " + line for line in lines) + "\nprocesses: *a9\n"
    with pytest.raises(ConfigError) as caught:
        load_config(write(body), {})
    assert "plugins.a0: expected a mapping of settings" in str(caught.value)
    assert "processes[0]: expected a mapping, got a list" in str(caught.value)
