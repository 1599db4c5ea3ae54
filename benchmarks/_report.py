"""results.json and the table in docs/benchmarks.md, both from the same rows."""

from __future__ import annotations

import json
import os
import platform
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ._results import Figure, Row
from ._subjects import ANCHORS, FLOOR

__all__ = ["render_markdown", "write_json", "write_markdown"]

BEGIN = "<!-- BEGIN GENERATED: python -m benchmarks -->"
END = "<!-- END GENERATED -->"


def write_json(path: Path, rows: Sequence[Row], meta: dict[str, Any]) -> None:
    data = {"meta": meta, "rows": [row.as_json() for row in rows]}
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n")


def machine() -> dict[str, Any]:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "kernel": platform.release(),
        "cpus": os.cpu_count(),
        "cpu": cpu,
        "python": platform.python_version(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }


def _number(value: float | None) -> str:
    if value is None:
        return "—"
    if value >= 100:
        return f"{value:.0f}"
    if value >= 10:
        return f"{value:.1f}"
    if value >= 1:
        return f"{value:.2f}"
    return f"{value:.3f}"


def _cell(figure: Figure | None) -> str:
    if figure is None:
        return "—"
    if figure.value is None:
        text = figure.note or "—"
        text = "n/a: " + text if not text.startswith("not measured") else text
    else:
        text = _number(figure.value)
    if figure.problems:
        text += " ✗ " + "; ".join(figure.problems)
    return text.replace("|", "\\|")


def _target(row: Row) -> str:
    """The target's text; a multiple of the floor also says what it came to."""
    if row.target.of_floor is None:
        return row.target.text
    limit = row.limit
    return f"{row.target.text} ({_number(limit)} {row.unit})" if limit is not None else row.target.text


def render_table(rows: Sequence[Row]) -> list[str]:
    head = [
        "scenario",
        "measure",
        "unit",
        "supervisor",
        FLOOR,
        "× floor",
        *ANCHORS,
        "other baseline",
        "× best anchor",
        "target",
        "result",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        anchors = [_cell(row.anchors.get(name)) for name in ANCHORS]
        others = [f"{name}: {_cell(f)}" for name, f in row.anchors.items() if name not in (*ANCHORS, FLOOR)]
        best = row.best_anchor
        ratio = f"{row.ratio:.2f}× {best[0]}" if row.ratio is not None and best else "—"
        status = {"pass": "**pass**", "fail": "**FAIL**"}.get(row.status, row.status)
        cells = [
            row.scenario,
            row.measure,
            row.unit,
            _cell(row.ours),
            _cell(row.anchors.get(FLOOR)),
            f"{row.floor_ratio:.2f}×" if row.floor_ratio is not None else "—",
            *anchors,
            "; ".join(others) or "—",
            ratio,
            _target(row),
            status,
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def render_markdown(rows: Sequence[Row], meta: dict[str, Any]) -> str:
    lines = [BEGIN, ""]
    m = meta["machine"]
    load = ", ".join(f"{x:g}" for x in m.get("load_average", []))
    load_start = ", ".join(f"{x:g}" for x in meta.get("load_average_at_start", []))
    lines.append(
        f"Run {meta['finished']} ({'smoke size' if meta['smoke'] else 'full size'}, {meta['duration']:.0f} s) "
        f"on {m['cpus']} × {m['cpu']}, Linux {m['kernel']}, Python {m['python']}, "
        f"load average {load_start} at the start and {load} at the end; "
        + ", ".join(f"{name} {version}" for name, version in meta["versions"].items())
        + "."
    )
    for partial in meta.get("merged", []):
        pm = partial["machine"]
        lines.append(
            f"Re-measured {partial['finished']} ({partial['duration']:.0f} s, load average "
            + ", ".join(f"{x:g}" for x in partial.get("load_average_at_start", []))
            + " at the start and "
            + ", ".join(f"{x:g}" for x in pm.get("load_average", []))
            + f" at the end): {', '.join(partial['scenarios'])}."
        )
    lines.append("")
    lines += render_table(rows)
    lines.append("")
    notes = [(row, name, f) for row in rows for name, f in [("supervisor", row.ours), *row.anchors.items()] if f.note]
    if notes:
        lines.append("Details:")
        lines.append("")
        seen: set[tuple[str, str, str]] = set()
        for row, name, figure in notes:
            key = (row.scenario, name, figure.note)  # the p50 and p99 rows share their runs
            if figure.value is not None and key not in seen:
                seen.add(key)
                lines.append(f"- {row.scenario} ({row.measure}), {name}: {figure.note}")
        lines.append("")
    gaps = [row for row in rows if row.status != "pass"]
    if gaps:
        lines.append("Gaps to the targets in this run:")
        lines.append("")
        for row in gaps:
            lines.append(f"- {_gap(row)}")
        lines.append("")
    counts = {status: sum(1 for r in rows if r.status == status) for status in ("pass", "fail", "not measured")}
    lines.append(f"Summary: {counts['pass']} pass, {counts['fail']} fail, {counts['not measured']} not measured.")
    lines += ["", END]
    return "\n".join(lines)


def _gap(row: Row) -> str:
    what = f"{row.scenario} ({row.measure})"
    if row.ours.value is None and not row.ours.problems:
        return f"{what}: {row.ours.note}"
    if row.target.of_floor is not None and row.floor is None and not row.ours.problems:
        return f"{what}: the Python floor was not measured in this run, so {row.target.text} cannot be judged"
    if row.ours.problems:
        value = f"{_number(row.ours.value)} {row.unit}" if row.ours.value is not None else "no figure"
        return f"{what}: {value}, but wrong: {'; '.join(row.ours.problems)}"
    assert row.ours.value is not None
    limit = row.limit
    if limit and row.target.tolerance is None:
        factor = f", {row.ours.value / limit:.2f}× the target"
    elif limit is not None and row.target.tolerance is not None:
        factor = f", off by {abs(row.ours.value - limit) * 1000:.0f} ms"
    else:
        factor = ""
    return f"{what}: {_number(row.ours.value)} {row.unit} against {_target(row)}{factor}"


def write_markdown(path: Path, rows: Sequence[Row], meta: dict[str, Any]) -> None:
    """Replace the generated part of ``path``, keeping the prose around it."""
    generated = render_markdown(rows, meta)
    text = path.read_text() if path.exists() else f"# Benchmarks\n\n{BEGIN}\n{END}\n"
    pattern = re.compile(re.escape(BEGIN) + ".*?" + re.escape(END), re.S)
    if pattern.search(text):
        text = pattern.sub(lambda _: generated, text)
    else:
        text = text.rstrip("\n") + "\n\n" + generated + "\n"
    path.write_text(text)
