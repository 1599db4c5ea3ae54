"""The public API is a deliberate list: adding or removing a name is a
decision that shows up here, and every exported name really resolves."""

from __future__ import annotations

import supervisor

PUBLIC = {
    "PHASES",
    "PROCESS_PHASES",
    "SKIP",
    "Config",
    "ConfigError",
    "Context",
    "Deadline",
    "ExitStatus",
    "PhasePlugin",
    "Position",
    "ProcessInfo",
    "ProcessSpec",
    "ProcessState",
    "Settings",
    "Step",
    "Timeline",
    "__version__",
    "format_duration",
    "hookimpl",
    "parse_duration",
    "read_phase",
}


def test_public_names_are_the_deliberate_list() -> None:
    assert set(supervisor.__all__) == PUBLIC
    assert sorted(dir(supervisor)) == sorted(PUBLIC)


def test_every_public_name_resolves() -> None:
    for name in supervisor.__all__:
        assert getattr(supervisor, name) is not None, name


def test_unknown_name_is_an_attribute_error() -> None:
    try:
        supervisor.not_a_thing  # type: ignore[attr-defined]  # noqa: B018
    except AttributeError as exc:
        assert "not_a_thing" in str(exc)
    else:
        raise AssertionError("expected AttributeError")
