"""Talking to a supervisor under test the way a user does: the real CLI."""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tests.pid1 import SUPERVISOR, Supervisor


def write_config(tmp_path: Path, text: str) -> str:
    path = tmp_path / "deploy.yaml"
    path.write_text(textwrap.dedent(text))
    return str(path)


def ctl(
    sup: Supervisor | None, *args: str, socket: str | None = None, prefix: Sequence[str] = (), timeout: float = 30
) -> subprocess.CompletedProcess[str]:
    """Run ``supervisor ARGS...`` against ``sup``'s socket (or ``socket``)."""
    env = {**os.environ, "SUPERVISOR_SOCKET": socket or (sup.socket if sup else "")}
    return subprocess.run(
        [*prefix, SUPERVISOR, *args], capture_output=True, text=True, env=env, timeout=timeout, check=False
    )


def status(sup: Supervisor) -> dict[str, Any]:
    result = ctl(sup, "status", "-o", "json")
    assert result.returncode == 0, result.stderr
    answer: dict[str, Any] = json.loads(result.stdout)
    return answer


def row(answer: dict[str, Any], name: str) -> dict[str, Any]:
    return next(p for p in answer["processes"] if p["name"] == name)


def wait_status(sup: Supervisor, predicate: Callable[[dict[str, Any]], bool], timeout: float = 20) -> dict[str, Any]:
    """Ask for the status until ``predicate`` holds (each ask is a real
    request; the bound is generous for busy machines)."""
    end = time.monotonic() + timeout
    last: dict[str, Any] = {}
    while time.monotonic() < end:
        if os.path.exists(sup.socket):
            last = status(sup)
            if predicate(last):
                return last
        time.sleep(0.05)
    raise AssertionError(f"status never matched within {timeout}s: {json.dumps(last, indent=1)}\n{sup.output}")


def one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    """The single stderr line of a failed command (and nothing on stdout)."""
    assert result.returncode != 0, result
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    return lines[0]
