"""Who the benchmarks measure, and how each is started."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from benchmarks._bench import MEASURED_FLAGS
from benchmarks._subjects import floor_subject

REPO = Path(__file__).resolve().parents[2]


def test_the_supervisor_is_measured_with_the_optimization_the_image_starts_it_with() -> None:
    # The image's flags are -I and these (benchmarks/_bench.py says why not -I).
    stage = (REPO / "tools" / "image" / "stage.sh").read_text()
    image = re.search(r"^PID1_FLAGS=-I(\S+)$", stage, re.MULTILINE)
    assert image is not None and f"-{image.group(1)}" == MEASURED_FLAGS == "-OO"


def test_the_floor_runs_on_the_interpreter_the_supervisors_script_names(tmp_path: Path) -> None:
    script = tmp_path / "supervisor"
    script.write_text(f"#!{sys.executable} {MEASURED_FLAGS}\nimport sys\n")
    assert floor_subject(str(script)).executable == sys.executable
    assert floor_subject(str(tmp_path / "missing")).executable == sys.executable  # this one's, as a fallback
