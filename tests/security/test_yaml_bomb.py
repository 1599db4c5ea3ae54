"""An alias bomb costs what its text costs (issue: 409 bytes inside a
plugin's ``json:`` body made ``check`` take 29 s and 5.5 GB, and a run
take 37 s to die on SIGTERM)."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from supervisor.config._source import MAX_VALUES
from tests.pid1 import SUPERVISOR, Supervisor
from tests.security._configs import pre_stop_request


def _bomb(tmp_path: Path) -> str:
    # Nine levels of nine aliases each: 9**9 (387 million) values once expanded.
    levels = ["a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    levels += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 9)]
    return pre_stop_request(tmp_path, "http://127.0.0.1:9/drain", "\n".join(levels))


def test_check_refuses_an_alias_bomb_fast_and_small(tmp_path: Path) -> None:
    config = _bomb(tmp_path)
    assert Path(config).stat().st_size < 1024
    start = time.monotonic()
    # 300 MB of address space: the interpreter and the file, but not one
    # expanded copy (the bomb's 387 million values would take gigabytes).
    result = subprocess.run(
        ["prlimit", "--as=300000000", SUPERVISOR, "check", "-c", config],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    took = time.monotonic() - start
    assert result.returncode == 2, result.stderr[-2000:]
    (line,) = result.stderr.splitlines()
    assert f"values, more than the {MAX_VALUES:,} a document may hold" in line, line
    assert took < 10, took  # (the time to start Python and read a file, on a loaded machine)


def test_a_run_with_an_alias_bomb_exits_2_at_once(tmp_path: Path) -> None:
    with Supervisor(["-c", _bomb(tmp_path)]) as sup:
        assert sup.wait(30) == 2
    assert "may hold" in sup.output
