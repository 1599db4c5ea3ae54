"""The runner's command line."""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from ._bench import MEASURED_FLAGS, REPO, Bench, SetupError, regular_install
from ._report import machine, render_table, write_json, write_markdown
from ._results import Figure, Row, Target
from ._subjects import ANCHORS, FLOOR, OURS, Subject, subject_version, subjects, supervisor_executable
from .scenarios import SCENARIOS

__all__ = ["main"]

USAGE_ERROR = 2


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        print(f"{self.prog}: {message}", file=sys.stderr)
        sys.exit(USAGE_ERROR)


def _parser() -> _Parser:
    parser = _Parser(
        prog="python -m benchmarks",
        description="Measure the supervisor as PID 1 against a minimal Python init (the floor), tini, dumb-init,"
        " catatonit and supervisord.",
    )
    parser.add_argument(
        "--smoke", action="store_true", help="every scenario once at a tiny size; checks answers, not timings"
    )
    parser.add_argument(
        "--only", nargs="+", metavar="SCENARIO", choices=list(SCENARIOS), help=f"run only these: {', '.join(SCENARIOS)}"
    )
    parser.add_argument(
        "--json", type=Path, help="where to write the results (default: benchmarks/results.json; none with --smoke)"
    )
    parser.add_argument(
        "--docs",
        type=Path,
        help="the Markdown file whose table to regenerate (default: docs/benchmarks.md; none with --smoke)",
    )
    parser.add_argument(
        "--merge",
        action="store_true",
        help="with --only: replace just these scenarios' rows in the existing results and table, keep the others",
    )
    parser.add_argument(
        "--editable",
        action="store_true",
        help="measure the supervisor of this interpreter's venv (make setup's editable install) instead of a venv"
        " installed from the wheels of the sources, built once per state of the sources and cached",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress on stderr")
    return parser


def main(argv: Sequence[str]) -> int:
    args = _parser().parse_args(argv)
    json_path = args.json or (None if args.smoke else REPO / "benchmarks" / "results.json")
    docs_path = args.docs or (None if args.smoke else REPO / "docs" / "benchmarks.md")
    missing = [name for name in ANCHORS if not shutil.which(name)]
    needed = [("unshare", "unshare (util-linux)")]
    if args.editable:
        needed.append((supervisor_executable(), "the supervisor CLI (make setup)"))
    for executable, what in needed:
        if shutil.which(executable) is None:
            print(f"python -m benchmarks: {what} is not installed", file=sys.stderr)
            return 1
    try:
        ours = supervisor_executable() if args.editable else regular_install(verbose=not args.quiet)
        if not args.quiet:
            print(f"measuring {ours}", file=sys.stderr)
        chosen = subjects([OURS, FLOOR, *[a for a in ANCHORS if a not in missing]], ours)
        return _run(args, chosen, missing, json_path, docs_path)
    except SetupError as exc:
        print(f"python -m benchmarks: {exc}", file=sys.stderr)
        return 1


def _run(
    args: argparse.Namespace, chosen: list[Subject], missing: list[str], json_path: Path | None, docs_path: Path | None
) -> int:
    names = args.only or list(SCENARIOS)
    started = time.monotonic()
    load_at_start = [round(x, 2) for x in os.getloadavg()]
    rows: list[Row] = []
    with Bench.create(chosen, smoke=args.smoke, verbose=not args.quiet) as bench:
        if missing:
            bench.say(f"not installed, left out: {', '.join(missing)}")
        for name in names:
            bench.say(f"{name}:")
            t0 = time.monotonic()
            try:
                rows += SCENARIOS[name](bench)
            except Exception as exc:  # one broken scenario must not lose the others' figures
                rows.append(_crashed(name, exc))
            bench.say(f"  ({time.monotonic() - t0:.1f} s)")
        versions = {s.name: subject_version(s) for s in chosen}
        versions[OURS] += (
            " (editable install)"
            if args.editable
            else f" (installed from wheels, run with the image's python {MEASURED_FLAGS})"
        )
    for row in rows:
        for name in missing:
            row.anchors.setdefault(name, Figure(note="not measured: not installed"))
    meta = {
        "finished": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "smoke": args.smoke,
        "duration": time.monotonic() - started,
        "machine": machine(),
        "load_average_at_start": load_at_start,
        "versions": versions,
        "scenarios": names,
    }
    if args.merge and json_path is not None and json_path.exists():
        rows, meta = merge_into(json.loads(json_path.read_text()), rows, meta)
    if json_path:
        write_json(json_path, rows, meta)
    if docs_path:
        write_markdown(docs_path, rows, meta)
    if not args.quiet:
        print("\n".join(render_table(rows)))
    return 0


def merge_into(previous: dict[str, Any], rows: list[Row], meta: dict[str, Any]) -> tuple[list[Row], dict[str, Any]]:
    """The previous run's rows with the re-measured scenarios' rows in their
    place (new scenarios at the end); the previous run's description, with
    this run listed under ``merged``."""
    fresh = {row.scenario: [r for r in rows if r.scenario == row.scenario] for row in rows}
    merged: list[Row] = []
    for data in previous["rows"]:
        name = data["scenario"]
        if name not in fresh:
            merged.append(Row.from_json(data))
        elif fresh[name]:
            merged += fresh[name]
            fresh[name] = []
    for pending in fresh.values():
        merged += pending
    base = dict(previous["meta"])
    partial = {k: meta[k] for k in ("finished", "duration", "machine", "load_average_at_start", "scenarios")}
    # An earlier partial run whose scenarios are all re-measured now is gone.
    kept = [m for m in base.get("merged", []) if not set(m["scenarios"]) <= set(partial["scenarios"])]
    base["merged"] = [*kept, partial]
    return merged, base


def _crashed(name: str, exc: Exception) -> Row:
    import traceback

    where = traceback.extract_tb(exc.__traceback__)[-1]
    problem = f"the scenario crashed: {type(exc).__name__}: {exc} ({Path(where.filename).name}:{where.lineno})"
    return Row(name, "(scenario crashed)", "", Target("—", None), Figure(problems=[problem]))
