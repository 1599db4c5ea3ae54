"""Overrun: how far past the grace period PID 1 exits when the shutdown stalls.

A main process that ignores SIGTERM and one stalling plugin per run: a plain
``def`` pre_stop hook blocking in ``time.sleep``, an ``async`` one in a CPU
loop (only the init layer's wall ends that), and one whose heavy import was
still running when SIGTERM came.  The figure is SIGTERM → PID 1 exits, minus
the grace period, the worst over the stalls; once on an idle machine (the
target) and once with every core kept busy by ``yes`` processes of the
benchmark's own (reported beside it).  Only the supervisor has hooks.
"""

from __future__ import annotations

import contextlib
import signal
import textwrap
import time
from pathlib import Path

from .._bench import Bench
from .._results import Figure, Row, Target
from .._sandbox import SandboxError, busy_cores

__all__ = ["overrun"]

_STALLS = {
    "blocking": """
        import time
        from supervisor import hookimpl

        @hookimpl
        def supervisor_pre_stop(ctx, deadline):
            time.sleep(60)
    """,
    "spinning": """
        from supervisor import hookimpl

        @hookimpl
        async def supervisor_pre_stop(ctx, deadline):
            while True:
                pass
    """,
    "slowimport": """
        import importlib
        import trio
        from supervisor import hookimpl

        @hookimpl
        async def supervisor_background(ctx):
            await trio.to_thread.run_sync(importlib.import_module, "bench_overrun_heavy", abandon_on_cancel=True)

        @hookimpl
        async def supervisor_shutdown_started(ctx, deadline, reason):
            with trio.move_on_after(deadline.remaining_for_hooks()):
                await trio.to_thread.run_sync(importlib.import_module, "bench_overrun_heavy", abandon_on_cancel=True)
    """,
}
_HEAVY = "import time\ntime.sleep(60)\n"


def _site(directory: Path) -> Path:
    site = directory / "site"
    site.mkdir(parents=True, exist_ok=True)
    points = []
    for name, source in _STALLS.items():
        (site / f"bench_overrun_{name}.py").write_text(textwrap.dedent(source))
        points.append(f"overrun-{name} = bench_overrun_{name}")
    (site / "bench_overrun_heavy.py").write_text(_HEAVY)
    dist = site / "pid1_bench_overrun-1.0.dist-info"
    dist.mkdir(exist_ok=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: pid1-bench-overrun\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[supervisor.plugins]\n" + "\n".join(points) + "\n")
    return site


def overrun(bench: Bench) -> list[Row]:
    grace = 1.0 if bench.smoke else 3.0
    site = _site(bench.scratch("overrun-site"))
    rows = []
    for load, target in (("idle", Target("≤ 100 ms", 100.0)), ("loaded", Target("reported", None))):
        overruns: dict[str, float] = {}
        problems: list[str] = []
        with busy_cores() if load == "loaded" else contextlib.nullcontext():
            for stall in _STALLS:
                bench.say(f"  supervisor, {stall}, {load}")
                try:
                    late = _once(bench, site, stall, grace, problems)
                except SandboxError as exc:
                    problems.append(str(exc).splitlines()[0])
                    continue
                if late is not None:
                    overruns[stall] = late
        worst = max(overruns.values()) if overruns else None
        note = ", ".join(f"{stall} {ms:+.0f}" for stall, ms in overruns.items())
        rows.append(
            Row(
                "overrun",
                f"stalled shutdown ({', '.join(_STALLS)}), {grace:g} s grace, {load}: "
                "SIGTERM → PID 1 exits, minus the grace period (worst)",
                "ms",
                target,
                Figure(worst, note, sorted(set(problems))),
                {anchor.name: Figure(note="no hooks") for anchor in bench.anchors},
            )
        )
    return rows


def _once(bench: Bench, site: Path, stall: str, grace: float, problems: list[str]) -> float | None:
    yaml = f"plugins:\n  overrun-{stall}: {{}}\n"
    env = {"PYTHONPATH": str(site), "SUPERVISOR_ALLOW_PYTHONPATH": "1"}
    role = ["ignore-term", "{sock}"]
    with bench.run(bench.ours, role, label=f"overrun-{stall}", yaml=yaml, env=env, grace=grace) as run:
        run.ready()
        if stall == "slowimport":
            time.sleep(0.2)  # the background import is under way
        sent = time.monotonic_ns()
        run.sandbox.signal(signal.SIGTERM)
        gone = run.expect_exit(problems, 128 + signal.SIGKILL, timeout=grace + 10)
    if gone is None:
        return None
    return (gone - sent) / 1e6 - grace * 1000
