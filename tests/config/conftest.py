"""Helpers for the configuration tests: write a YAML file, load it."""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest

from supervisor.config import Config, ConfigError, load_config

# The fixtures' types; the test modules repeat them (they do not import conftest).
WriteFile = Callable[[str], str]
Load = Callable[..., Config]
Problems = Callable[..., list[str]]


@pytest.fixture
def write(tmp_path: Path) -> WriteFile:
    """Write dedented YAML to a file in tmp_path; return its path."""

    def write_file(text: str, name: str = "deploy.yaml") -> str:
        path = tmp_path / name
        path.write_text(textwrap.dedent(text).lstrip("\n"))
        return str(path)

    return write_file


@pytest.fixture
def load(write: WriteFile) -> Load:
    """Load YAML text as a configuration (environment: only what is passed)."""

    def load_text(text: str, environ: Mapping[str, str] | None = None) -> Config:
        return load_config(write(text), environ or {})

    return load_text


@pytest.fixture
def problems(write: WriteFile) -> Problems:
    """The problem lines for YAML text, with the file name shortened to deploy.yaml."""

    def problem_lines(text: str, environ: Mapping[str, str] | None = None) -> list[str]:
        path = write(text)
        with pytest.raises(ConfigError) as caught:
            load_config(path, environ or {})
        return [line.replace(path, "deploy.yaml") for line in str(caught.value).splitlines()]

    return problem_lines
