"""The image runs the supervisor as ``python -IOO``: no docstrings, no
asserts.  What the command line prints must not depend on either."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _printed(flags: list[str], args: list[str]) -> tuple[int, str]:
    result = subprocess.run(
        [sys.executable, *flags, "-m", "supervisor", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return result.returncode, result.stdout + result.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["--help"],
        ["help", "check"],
        ["logs", "--help"],
        ["libvirt", "--help"],
        ["check", "--no-compile", "-c", str(REPO / "examples" / "reference.yaml")],
    ],
    ids=lambda args: " ".join(args[:2]),
)
def test_the_command_line_prints_the_same_under_python_oo(args: list[str]) -> None:
    plain = _printed([], args)
    assert plain[0] == 0 and len(plain[1].splitlines()) > 3, plain
    assert _printed(["-OO"], args) == plain
