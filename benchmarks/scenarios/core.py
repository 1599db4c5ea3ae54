"""The PID-1 scenarios every init can be measured on: start-up, signal
forwarding, the orphan storm, exit latency, memory, SIGKILL escalation.

Every init, the Python floor among them, runs the same probe as its main
process.  The supervisor's targets for start-up, signal p50, exit and memory
are multiples of the floor's figure in the same run; start-up, signal p50 and
memory are measured again with a plan (the supervisor with a configuration
file: a main process and one helper)."""

from __future__ import annotations

import os
import signal
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from supervisor.pid1.state import wall_margin

from .._bench import Bench
from .._results import Figure, Row, Target, percentile
from .._sandbox import ExitWatch, SandboxError
from .._subjects import OURS, PLAN, PLAN_UNCOMPILED, PLANS, Subject

__all__ = ["escalation", "exit_latency", "memory", "orphan_storm", "signal_forwarding", "startup"]

MS = 1e6  # ns per ms
WITH_PLAN = "with a plan (main + one helper process)"
# A row that shows a figure beside its target row, with no target of its own.
_INFORMATIONAL = Target("— (informational: no `supervisor check` before the run)", None)


def each(bench: Bench, measure: Callable[[Subject], Figure]) -> tuple[Figure, dict[str, Figure]]:
    """``measure`` every subject of the run; the supervisor's figure and the others'."""
    figures = {subject.name: measure_one(bench, subject, measure) for subject in bench.subjects}
    ours = figures.pop(OURS)
    return ours, figures


def measure_one(bench: Bench, subject: Subject, measure: Callable[[Subject], Figure]) -> Figure:
    """``measure(subject)``; a failure becomes a problem on its figure."""
    bench.say(f"  {subject.name}")
    try:
        return measure(subject)
    except SandboxError as exc:
        return Figure(problems=[str(exc).splitlines()[0]])


# -- start-up ---------------------------------------------------------------------


def interleaved(
    bench: Bench,
    rounds: int,
    once: Callable[[Subject, list[str]], float | None],
    subjects: Sequence[Subject] = (),
) -> dict[str, Figure]:
    """Median of ``rounds`` runs of ``once`` per subject (default: the run's),
    the subjects taking turns so that drift on the machine hits all of them
    alike.  ``once`` returns a sample (or None) and appends failed checks to
    its list."""
    subjects = subjects or bench.subjects
    samples: dict[str, list[float]] = {s.name: [] for s in subjects}
    problems: dict[str, list[str]] = {s.name: [] for s in subjects}
    for _ in range(rounds):
        for subject in subjects:
            try:
                sample = once(subject, problems[subject.name])
            except (SandboxError, OSError) as exc:
                problems[subject.name].append(str(exc).splitlines()[0])
                continue
            if sample is not None:
                samples[subject.name].append(sample)
    return {
        name: Figure(
            statistics.median(values) if values else None,
            note=f"median of {len(values)}; min {min(values):.2f}, max {max(values):.2f}" if values else "",
            problems=sorted(set(problems[name])),
        )
        for name, values in samples.items()
    }


def startup(bench: Bench) -> list[Row]:
    """Init exec → main process exec, median of 20 (1 in smoke mode)."""

    def once(subject: Subject, problems: list[str]) -> float | None:
        with bench.run(subject, ["stamp", "{sock}"], label="startup") as run:
            started = run.channel.receive(30, "exec")
            main = run.channel.receive(30, "start")
            run.expect_exit(problems, 0)
            return (main.ns - started.ns) / MS

    subjects = [*bench.subjects, bench.plan, bench.plan_uncompiled]
    figures = interleaved(bench, 1 if bench.smoke else 20, once, subjects)
    ours, plan, uncompiled = figures.pop(OURS), figures.pop(PLAN), figures.pop(PLAN_UNCOMPILED)
    measure = "exec → main process exec (median)"
    return [
        Row("start-up", measure, "ms", Target.floor_multiple(1.5), ours, figures),
        Row("start-up", f"{measure}, {WITH_PLAN}", "ms", Target.floor_multiple(2), plan, figures),
        # What `supervisor check` in the image build saves.
        Row("start-up", f"{measure}, {WITH_PLAN}, not compiled", "ms", _INFORMATIONAL, uncompiled, figures),
    ]


# -- signal forwarding ------------------------------------------------------------


def signal_forwarding(bench: Bench) -> list[Row]:
    """SIGUSR1 to PID 1 → the child's handler runs; the next signal only after
    the child's acknowledgement, so no two are ever coalesced."""
    count = 5 if bench.smoke else 1000

    def measure(subject: Subject) -> Figure:
        latencies: list[float] = []
        problems: list[str] = []
        with bench.run(subject, ["signals", "{sock}"], label="signals") as run:
            run.ready()
            run.settle()
            pid1 = run.sandbox.pid1
            for i in range(count):
                sent = time.monotonic_ns()
                os.kill(pid1, signal.SIGUSR1)
                try:
                    handled = run.channel.receive(2, "usr1")
                except SandboxError:
                    problems.append(f"signal {i + 1} of {count} never reached the child (waited 2 s)")
                    break
                latencies.append((handled.ns - sent) / MS)
            run.sandbox.signal(signal.SIGTERM)
            run.expect_exit(problems, 0)
        if not latencies and subject.name not in (OURS, *PLANS):
            # An init that forwards nothing is a fact about it, not a wrong answer.
            return Figure(note="does not forward SIGUSR1: nothing reached the child in 2 s", problems=problems[1:])
        if not latencies:
            return Figure(problems=problems)
        return _Latencies(latencies, problems)

    ours, anchors = each(bench, measure)
    with_plan = measure_one(bench, bench.plan, measure)
    rows = []
    for measure_name, p, target in (("p50", 50, Target.floor_multiple(1.5)), ("p99", 99, Target("≤ 5 ms", 5.0))):
        rows.append(
            Row(
                "signal forwarding",
                f"SIGUSR1 → child's handler, {measure_name} of {count}",
                "ms",
                target,
                _pick(ours, p),
                {name: _pick(figure, p) for name, figure in anchors.items()},
            )
        )
    rows.append(
        Row(
            "signal forwarding",
            f"SIGUSR1 → child's handler, p50 of {count}, {WITH_PLAN}",
            "ms",
            Target.floor_multiple(1.5),
            _pick(with_plan, 50),
            rows[0].anchors,
        )
    )
    return rows


class _Latencies(Figure):
    """A figure that still holds its samples, so p50 and p99 rows share one run."""

    def __init__(self, samples: list[float], problems: list[str]) -> None:
        super().__init__(None, _latency_note(samples), problems)
        self.samples = samples


def _pick(figure: Figure, p: float) -> Figure:
    if isinstance(figure, _Latencies):
        return Figure(percentile(figure.samples, p), figure.note, figure.problems)
    return figure


def _latency_note(samples: list[float]) -> str:
    if not samples:
        return ""
    return f"n={len(samples)}, min {min(samples):.3f}, max {max(samples):.3f}"


# -- orphan storm -----------------------------------------------------------------


def orphan_storm(bench: Bench) -> list[Row]:
    """The child makes orphans in bursts (100 at once, then 10 ms); each
    orphan stamps its exit, and an observer process checks every pending
    orphan's /proc entry every 50 µs until PID 1 has reaped it."""
    total, burst = (40, 10) if bench.smoke else (10_000, 100)

    def measure(subject: Subject) -> Figure:
        problems: list[str] = []
        with bench.run(subject, ["orphans", "{sock}", "{dir}/ages", str(total), str(burst)], label="orphans") as run:
            run.channel.receive(30, "exec")
            run.sandbox.pid1  # noqa: B018 (watch its exit)
            done = run.channel.receive(600, "orphans")
            reaped, lost, zombies = (int(x) for x in done.extra)
            ages = [int(line) / MS for line in Path(run.directory, "ages").read_text().split()]
            if reaped != total:
                problems.append(f"{total - reaped} of {total} orphans never reaped ({lost} still zombies after 10 s)")
            if zombies:
                problems.append(f"{zombies} zombie(s) left at the end")
            run.expect_exit(problems, 0)
        if not ages:
            return Figure(problems=problems or ["no orphan was reaped"])
        p50, p99 = percentile(ages, 50), percentile(ages, 99)
        note = f"{reaped} orphans in bursts of {burst}; age p50 {p50:.3f}, p99 {p99:.3f}"
        return Figure(max(ages), note, problems)

    ours, anchors = each(bench, measure)
    return [
        Row(
            "orphan storm",
            f"oldest zombie of {total:,} orphans; none left",
            "ms",
            Target("≤ 100 ms", 100.0),
            ours,
            anchors,
        )
    ]


# -- exit latency -----------------------------------------------------------------


def exit_latency(bench: Bench) -> list[Row]:
    """The only process exits (stamped right before ``_exit``) → PID 1 is
    gone (its pidfd turns readable).  supervisord exits through the usual
    event-listener recipe, since it has no exit-with-the-program option."""

    # Where the supervisor's time goes: main process → orchestrator gone.
    orchestrator_gone: list[float] = []

    def once(subject: Subject, problems: list[str]) -> float | None:
        with bench.run(subject, ["wait-exit", "{dir}/go", "{sock}"], label="exit") as run:
            run.ready()
            # The same settling time for every init: the measure is the exit
            # path of a running init, not the end of its start-up (the
            # supervisor starts its main process before it has finished
            # importing, see the start-up row).
            time.sleep(0.05 if bench.smoke else 0.5)
            helpers = [pid for pid in run.init_pids(bench.probe) if pid != run.sandbox.pid1]
            orchestrator = ExitWatch(helpers[0]) if subject.name == OURS and len(helpers) == 1 else None
            _release(run.directory / "go")
            last = run.channel.receive(10, "exit")
            gone = run.expect_exit(problems, 0)
            if orchestrator is not None:
                at = orchestrator.wait(1)
                orchestrator.close()
                if at is not None:
                    orchestrator_gone.append((at - last.ns) / MS)
            return (gone - last.ns) / MS if gone is not None else None

    figures = interleaved(bench, 1 if bench.smoke else 10, once)
    ours = figures.pop(OURS)
    if orchestrator_gone:
        ours.note += f"; the orchestrator was gone after {statistics.median(orchestrator_gone):.2f} (median)"
    measure = "last process exits → PID 1 exits (median)"
    return [Row("exit latency", measure, "ms", Target.floor_multiple(1.3), ours, figures)]


def _release(fifo: Path) -> None:
    """One byte into the probe's FIFO: its cue to exit."""
    fd = os.open(fifo, os.O_WRONLY)
    try:
        os.write(fd, b"x")
    finally:
        os.close(fd)


# -- memory -----------------------------------------------------------------------


@dataclass(frozen=True)
class Memory:
    """One process's memory in MiB: PSS (shared pages divided among their
    users), USS (its private pages only) and RSS (every page it maps)."""

    pss: float
    uss: float
    rss: float


def memory_of(pid: int) -> Memory:
    """From /proc/PID/smaps_rollup; zeros if the process is gone."""
    fields: dict[str, int] = {}
    try:
        text = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except OSError:
        return Memory(0.0, 0.0, 0.0)
    for line in text.splitlines():
        words = line.split()
        if len(words) == 3 and words[2] == "kB":
            fields[words[0].rstrip(":")] = int(words[1])
    private = fields.get("Private_Clean", 0) + fields.get("Private_Dirty", 0)
    return Memory(fields.get("Pss", 0) / 1024, private / 1024, fields.get("Rss", 0) / 1024)


def measure_memory(
    bench: Bench,
    subject: Subject,
    *,
    label: str,
    idle: Callable[[list[str]], None] | None = None,
    **spec: object,
) -> Figure:
    """PSS of the init's own processes, idle with one child that exits on
    SIGTERM; then SIGTERM, and the init must exit 0.  ``idle`` waits for the
    steady state (and records problems); by default a fixed settling time."""
    problems: list[str] = []
    with bench.run(subject, ["term-exit", "{sock}"], label=label, exit_with_main=False, **spec) as run:
        run.ready()
        if idle is not None:
            idle(problems)
        time.sleep(0.3 if bench.smoke else 2.0)
        pids = run.init_pids(bench.probe)
        usage = [(_name(pid, pid == pids[0]), memory_of(pid)) for pid in pids]
        run.sandbox.signal(signal.SIGTERM)
        run.expect_exit(problems, 0)
    parts = " + ".join(f"{name} {m.pss:.1f}" for name, m in usage)
    uss, rss = sum(m.uss for _, m in usage), sum(m.rss for _, m in usage)
    note = f"PSS {parts}; USS {uss:.1f}, RSS {rss:.1f}"
    return Figure(sum(m.pss for _, m in usage), note, problems)


def _name(pid: int, is_pid1: bool) -> str:
    try:
        name = Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        name = "?"
    return f"PID 1 ({name})" if is_pid1 else name


def memory(bench: Bench) -> list[Row]:
    def measure(subject: Subject) -> Figure:
        return measure_memory(bench, subject, label="memory")

    ours, anchors = each(bench, measure)
    with_plan = measure_one(bench, bench.plan, measure)
    what = "PSS of the init's processes, idle"
    return [
        Row("memory", f"{what}, one child", "MiB", Target.floor_multiple(1.5), ours, anchors),
        Row("memory", f"{what}, {WITH_PLAN}", "MiB", Target("≤ 20 MiB", 20.0), with_plan, anchors),
    ]


# -- escalation -------------------------------------------------------------------


def escalation(bench: Bench) -> list[Row]:
    """A child that ignores SIGTERM, a 2 s grace period: when is it killed
    (SIGTERM to PID 1 → the child's pidfd turns readable)?  The worst of
    three runs counts; inits without escalation are watched for grace + 1.5 s."""
    # supervisord counts stopwaitsecs in whole seconds, and checks once a second.
    grace = 1.0 if bench.smoke else 2.0
    rounds = 1 if bench.smoke else 3
    watch = grace + 1.5  # how long to wait for a kill that may never come
    # The supervisor escalates its margin before the grace period ends, so
    # that it finishes before its own wall; that moment is the target.
    escalates_at = round(grace - wall_margin(grace), 3)

    def once(subject: Subject) -> tuple[float | None, list[str]]:
        problems: list[str] = []
        with bench.run(subject, ["ignore-term", "{sock}"], label="escalation", grace=grace) as run:
            run.ready()
            children = run.main_pids(bench.probe)
            if len(children) != 1:
                raise SandboxError(f"expected one probe process, found {len(children)}")
            child = ExitWatch(children[0])
            sent = time.monotonic_ns()
            run.sandbox.signal(signal.SIGTERM)
            died = child.wait(watch)
            child.close()
            if died is None:
                return None, problems
            expected = 0 if subject.name == "supervisord" else 128 + signal.SIGKILL
            run.expect_exit(problems, expected)
            return (died - sent) / 1e9, problems

    def measure(subject: Subject) -> Figure:
        runs = rounds if subject.name in (OURS, "supervisord") else 1
        kills: list[float] = []
        problems: list[str] = []
        for _ in range(runs):
            killed_at, found = once(subject)
            problems += found
            if killed_at is None:
                if subject.name == OURS:
                    problems.append(f"the child still ran {watch:g}s after SIGTERM")
                    break
                return Figure(note=f"no escalation: the child still ran {watch:g}s after SIGTERM")
            kills.append(killed_at)
        if not kills:
            return Figure(problems=problems)
        worst = max(kills, key=lambda k: abs(k - escalates_at))
        return Figure(worst, "runs: " + ", ".join(f"{k:.3f}" for k in kills), problems)

    ours, anchors = each(bench, measure)
    return [
        Row(
            "escalation accuracy",
            f"child ignoring SIGTERM, {grace:g} s grace: SIGKILL at (worst of {rounds})",
            "s",
            Target(f"{escalates_at:g} s ± 50 ms", escalates_at, 0.05),
            ours,
            anchors,
        )
    ]
