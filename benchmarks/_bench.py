"""The run's shared state: the probe binary, a scratch directory, the subjects,
and one way to start an init under test with the probe as its main process."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from ._sandbox import Channel, Sandbox
from ._subjects import FLOOR, OURS, PLANS, RunSpec, Subject, plan_subject

__all__ = ["MEASURED_FLAGS", "Bench", "Run", "SetupError", "as_the_image_runs_it", "build_probe", "regular_install"]

HERE = Path(__file__).resolve().parent
REPO = HERE.parent


class SetupError(Exception):
    """The run cannot start here; the message says why."""


def build_probe(directory: Path) -> Path:
    """Compile probe.c (a second or less) into ``directory``."""
    binary = directory / "probe"
    compiler = shutil.which("gcc") or shutil.which("cc")
    if compiler is None:
        raise SetupError("no C compiler (gcc) to build benchmarks/probe.c; `make bench` installs one")
    command = [compiler, "-O2", "-Wall", "-o", str(binary), str(HERE / "probe.c")]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise SetupError(f"benchmarks/probe.c does not compile: {result.stderr.strip().splitlines()[0]}")
    return binary


# The interpreter flags the supervisor is measured with.  The image's script
# starts it as `python -IOO` (PID1_FLAGS in tools/image/stage.sh, which says
# why); -I is left out here: it would hide the plugins the hooks and overrun
# scenarios put on PYTHONPATH (the interpreter then ignores the variable,
# SUPERVISOR_ALLOW_PYTHONPATH or not), and changes nothing the others measure.
MEASURED_FLAGS = "-OO"


def regular_install(cache: Path | None = None, *, verbose: bool = True) -> str:
    """The CLI of a venv installed from the wheels of the sources as they are,
    as ``pip install`` leaves it for a user, started as the image starts it
    (``as_the_image_runs_it``); tools/dist.py builds the venv once per state
    of the sources and keeps it in ``cache`` (default: its own, outside the
    clone, which `make dist` fills too).

    Not the development venv's: its editable installs put one import finder
    per package (six of them) on every interpreter's ``sys.meta_path`` from
    .pth files, and each import of ours goes through them to the source tree,
    which the start-up and memory rows would count as the supervisor's.
    """
    command = [sys.executable, str(REPO / "tools" / "dist.py"), *(["--cache", str(cache)] if cache else []), "venv"]
    # Its progress (a build takes half a minute) goes straight to our stderr.
    errors = None if verbose else subprocess.PIPE
    result = subprocess.run(command, stdout=subprocess.PIPE, stderr=errors, text=True, check=False)
    if result.returncode != 0:
        detail = "its error is above" if verbose else "\n".join(result.stderr.strip().splitlines()[-20:])
        raise SetupError(f"cannot build the regular install from the wheels (tools/dist.py venv): {detail}")
    return str(as_the_image_runs_it(Path(result.stdout.strip())))


def as_the_image_runs_it(venv: Path) -> Path:
    """A copy of ``venv``'s ``supervisor`` script whose first line starts the
    venv's interpreter with the image's ``-OO`` (``MEASURED_FLAGS``), and the
    .pyc files it reads, compiled into the venv as the image's build
    compiles them.

    The copy keeps the name ``supervisor`` (the kernel names the process
    after the script), in a directory of its own next to ``bin``.
    """
    python = venv / "bin" / "python"
    compiled = subprocess.run(
        [str(python), "-m", "compileall", "-q", "-j", "0", "-o", "2", str(venv / "lib")],
        capture_output=True,
        text=True,
        check=False,
    )
    if compiled.returncode != 0:
        raise SetupError(f"cannot compile the regular install for -OO: {compiled.stdout.strip() or compiled.stderr}")
    _first, body = (venv / "bin" / "supervisor").read_text().split("\n", 1)
    script = venv / "image" / "supervisor"
    script.parent.mkdir(exist_ok=True)
    # Written aside and renamed: another run may be starting this one.
    staged = script.with_name(f".supervisor.{os.getpid()}")
    staged.write_text(f"#!{python} {MEASURED_FLAGS}\n{body}")
    staged.chmod(0o755)
    staged.replace(script)
    return script


@dataclass
class Bench:
    """One benchmark run; ``smoke`` shrinks every scenario to a tiny size."""

    workdir: Path
    probe: Path
    subjects: list[Subject]
    smoke: bool = False
    verbose: bool = True
    _counter: int = 0

    @classmethod
    @contextlib.contextmanager
    def create(cls, subjects: list[Subject], *, smoke: bool, verbose: bool = True) -> Iterator[Bench]:
        # Short path: Unix socket paths are limited to 107 bytes.
        workdir = Path(tempfile.mkdtemp(prefix="pid1-bench-"))
        try:
            yield cls(workdir, build_probe(workdir), subjects, smoke=smoke, verbose=verbose)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)

    @property
    def ours(self) -> Subject:
        return next(s for s in self.subjects if s.name == OURS)

    @property
    def anchors(self) -> list[Subject]:
        return [s for s in self.subjects if s.name != OURS]

    @property
    def plan(self) -> Subject:
        """The supervisor measured, run with a configuration file (a main
        process and one helper) instead of ``-- COMMAND``."""
        return plan_subject(self.ours.executable)

    @property
    def plan_uncompiled(self) -> Subject:
        """The same, without ``supervisor check`` first: no compiled plan."""
        return plan_subject(self.ours.executable, compiled=False)

    @property
    def floor(self) -> Subject | None:
        return next((s for s in self.subjects if s.name == FLOOR), None)

    def say(self, message: str) -> None:
        if self.verbose:
            print(message, file=sys.stderr, flush=True)

    def scratch(self, label: str) -> Path:
        self._counter += 1
        path = self.workdir / f"{self._counter:03d}-{label}"
        path.mkdir()
        return path

    @contextlib.contextmanager
    def run(self, subject: Subject, role: Sequence[str], *, label: str, **spec: object) -> Iterator[Run]:
        """Start ``subject`` as PID 1 with ``probe ROLE SOCK ARGS...`` as its
        main process (``{sock}`` and ``{dir}`` in ``role`` are filled in)."""
        with self._start(subject, None, role, label, spec) as run:
            yield run

    @contextlib.contextmanager
    def run_command(self, subject: Subject, command: Sequence[str], *, label: str, **spec: object) -> Iterator[Run]:
        """Start ``subject`` as PID 1 with ``command`` as its main process."""
        with self._start(subject, command, (), label, spec) as run:
            yield run

    @contextlib.contextmanager
    def _start(
        self,
        subject: Subject,
        command: Sequence[str] | None,
        role: Sequence[str],
        label: str,
        spec: dict[str, object],
    ) -> Iterator[Run]:
        user_namespace = bool(spec.pop("user_namespace", True))
        directory = self.scratch(f"{label}-{subject.name}")
        channel = Channel(directory / "s")
        if command is None:
            command = [str(self.probe), *(arg.format(sock=channel.path, dir=directory) for arg in role)]
        if subject.name in PLANS:
            # The plan's second process: the probe, silent until SIGTERM ends it.
            spec.setdefault("helper", [str(self.probe), "idle", str(channel.path)])
        run_spec = RunSpec(command=list(command), **spec)  # type: ignore[arg-type]
        env = dict(run_spec.env)
        if subject.name == "supervisord":
            # Its package is also called `supervisor`: nothing of ours may shadow it.
            env["PYTHONPATH"] = ""
        sandbox = Sandbox(
            self.probe,
            channel,
            subject.argv(run_spec, directory),
            directory / "init.log",
            env=env,
            user_namespace=user_namespace,
        )
        try:
            yield Run(subject, sandbox, channel, directory)
        finally:
            sandbox.close()
            channel.close()


@dataclass
class Run:
    subject: Subject
    sandbox: Sandbox
    channel: Channel
    directory: Path

    def ready(self, timeout: float = 30) -> int:
        """Wait for the probe's "ready"; returns the exec-stamp time (ns)."""
        started = self.channel.receive(timeout, "exec")
        self.channel.receive(timeout, "ready")
        self.sandbox.pid1  # noqa: B018 (open the pidfd now)
        return started.ns

    def settle(self, quiet: float = 0.3, timeout: float = 15) -> None:
        """Wait until no process of the namespace has used CPU time, and none
        has come or gone, for ``quiet`` seconds (at most ``timeout``).

        The main process is ready before the init is: the supervisor with a
        plan starts it, then its orchestrator imports trio and starts the
        helper for a few hundred ms, taking one of the machine's cores from
        the signal it is meant to forward.  What a pod lives with is the
        init at rest.
        """
        end = time.monotonic() + timeout
        seen = self._activity()
        quiet_since = time.monotonic()
        while time.monotonic() < end:
            time.sleep(0.05)
            now = self._activity()
            if now != seen:
                seen, quiet_since = now, time.monotonic()
            elif time.monotonic() - quiet_since >= quiet:
                return

    def _activity(self) -> tuple[tuple[int, ...], int]:
        """The namespace's processes, and the CPU ticks they have used."""
        pids = tuple(sorted(self.sandbox.processes()))
        ticks = 0
        for pid in pids:
            with contextlib.suppress(OSError, IndexError, ValueError):
                fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
                ticks += int(fields[11]) + int(fields[12])  # utime, stime
        return pids, ticks

    def main_pids(self, probe: Path) -> list[int]:
        """Processes of the namespace running the probe (the workload)."""
        found = []
        for pid in self.sandbox.processes():
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/{pid}/exe") == str(probe):
                    found.append(pid)
        return found

    def init_pids(self, probe: Path) -> list[int]:
        """The init's own processes: everything in the namespace but the probe."""
        workload = set(self.main_pids(probe))
        return [pid for pid in self.sandbox.processes() if pid not in workload]

    def expect_exit(self, figure_problems: list[str], expected: int, timeout: float = 30) -> int | None:
        """Wait for PID 1's exit; record a problem unless it exits with
        ``expected``.  Returns the exit time (ns) or None."""
        try:
            at = self.sandbox.wait_exit_ns(timeout)
        except Exception as exc:  # the message carries the log
            figure_problems.append(str(exc).splitlines()[0])
            return None
        code = self.sandbox.exit_code()
        if code != expected:
            figure_problems.append(f"exit status {code}, expected {expected}")
        if self.subject.name in (OURS, *PLANS):
            crash = _traceback(self.sandbox.output(lines=10_000))
            if crash:
                figure_problems.append(f"a traceback in the supervisor's log: {crash}")
        return at


def _traceback(log: str) -> str | None:
    """The exception line of the last traceback in ``log``, if any."""
    lines = log.splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("Traceback (most recent call last)")]
    if not starts:
        return None
    after = lines[starts[-1] + 1 :]
    return next((line for line in after if line and not line[0].isspace()), "(no exception line)")
