"""Hook concurrency: ten plugins, each with a 1 s ``pre_stop`` hook.

The plugins are ten entry points of one installed-looking distribution (a
``*.dist-info`` with ``entry_points.txt`` on PYTHONPATH, as pip would leave
it), all naming one class that the host instantiates once per plugin.  Run
one after the other they would take 10 s; the target is the plugin host's
fan-out: SIGTERM → PID 1 exits within 1.1 s.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

from .._bench import Bench
from .._results import Figure, Row, Target
from .._sandbox import SandboxError

__all__ = ["hook_concurrency"]

PLUGINS = 10

_MODULE = '''
"""Benchmark plugin: sleeps in pre_stop, then notes that it finished."""

import trio

from supervisor import hookimpl


class SlowPreStop:
    @hookimpl
    def supervisor_configure(self, settings, config):
        settings.check_keys(["seconds", "marker"])
        return settings.duration("seconds", required=True), settings.string("marker", required=True)

    @hookimpl
    async def supervisor_pre_stop(self, ctx, deadline):
        seconds, marker = ctx.settings
        await trio.sleep(seconds)
        with open(marker, "a") as out:
            out.write(ctx.plugin + "\\n")
'''


def _site(directory: Path) -> Path:
    site = directory / "site"
    site.mkdir()
    (site / "bench_slow_pre_stop.py").write_text(_MODULE)
    dist = site / "pid1_bench_hooks-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: pid1-bench-hooks\nVersion: 1.0\n")
    points = "\n".join(f"bench-slow-{i} = bench_slow_pre_stop:SlowPreStop" for i in range(PLUGINS))
    (dist / "entry_points.txt").write_text(f"[supervisor.plugins]\n{points}\n")
    return site


def hook_concurrency(bench: Bench) -> list[Row]:
    seconds = 0.2 if bench.smoke else 1.0
    rounds = 1 if bench.smoke else 3
    directory = bench.scratch("hooks-site")
    site = _site(directory)
    durations: list[float] = []
    problems: list[str] = []
    for round_ in range(rounds):
        marker = directory / f"finished-{round_}.txt"
        sections = "".join(f"  bench-slow-{i}: {{seconds: {seconds:g}s, marker: '{marker}'}}\n" for i in range(PLUGINS))
        yaml = f"plugins:\n{sections}"
        bench.say(f"  supervisor, round {round_ + 1}")
        try:
            env = {"PYTHONPATH": str(site), "SUPERVISOR_ALLOW_PYTHONPATH": "1"}
            with bench.run(bench.ours, ["term-exit", "{sock}"], label="hooks", yaml=yaml, env=env) as run:
                run.ready()
                sent = time.monotonic_ns()
                run.sandbox.signal(signal.SIGTERM)
                gone = run.expect_exit(problems, 0, timeout=seconds * PLUGINS + 10)
                finished = marker.read_text().split() if marker.exists() else []
                if len(finished) != PLUGINS:
                    problems.append(f"{len(finished)} of {PLUGINS} pre_stop hooks finished")
                if gone is not None:
                    durations.append((gone - sent) / 1e9)
        except SandboxError as exc:
            problems.append(str(exc).splitlines()[0])
    ours = Figure(
        max(durations) if durations else None,
        ("worst of " + ", ".join(f"{d:.3f}" for d in durations)) if durations else "",
        sorted(set(problems)),
    )
    anchors = {
        anchor.name: Figure(note="no hooks" if anchor.name != "supervisord" else "no shutdown hooks")
        for anchor in bench.anchors
    }
    return [
        Row(
            "hook concurrency",
            f"ten {seconds:g} s pre_stop hooks: SIGTERM → PID 1 exits (worst of {rounds})",
            "s",
            Target("≤ 1.1 s", 1.1),
            ours,
            anchors,
        )
    ]
