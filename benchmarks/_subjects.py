"""The inits under test: the supervisor and its anchors, each as a command line.

Every subject turns the same ``RunSpec`` (the main process, a grace period,
extra YAML for the supervisor) into the argv that becomes PID 1.  The C inits
take the command directly; supervisord gets a generated INI file, with the
event listener its users add so that it exits when its program does (it has
no such option of its own).

Two more are not inits of their own: the Python floor (floor_init.py, run by
the interpreter of the supervisor measured, the least a Python PID 1 costs)
and the supervisor with a plan (a configuration file naming the main process
and one helper process, which needs the orchestrator), checked with
``supervisor check`` first as an image build does, so that its compiled plan
starts the main process; and once more without that step.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ._results import FLOOR

__all__ = [
    "ANCHORS",
    "FLOOR",
    "OURS",
    "PLAN",
    "PLANS",
    "PLAN_UNCOMPILED",
    "RunSpec",
    "Subject",
    "floor_subject",
    "plan_subject",
    "subject_version",
]

OURS = "supervisor"
PLAN = "supervisor with a plan"
PLAN_UNCOMPILED = "supervisor with a plan, not compiled"
PLANS = (PLAN, PLAN_UNCOMPILED)
ANCHORS = ("tini", "dumb-init", "catatonit", "supervisord")
# The C inits take the command directly, after these options.
_C_INITS = {"tini": ["--"], "dumb-init": [], "catatonit": ["--"]}
FLOOR_INIT = Path(__file__).resolve().parent / "floor_init.py"


@dataclass(frozen=True)
class RunSpec:
    """What a scenario wants PID 1 to run."""

    command: Sequence[str]
    grace: float | None = None  # seconds from SIGTERM to SIGKILL, where the init has such a thing
    yaml: str = ""  # extra top-level YAML for the supervisor (plugins:)
    env: dict[str, str] = field(default_factory=dict)
    exit_with_main: bool = True  # supervisord: add the exit-on-main-exit listener
    main_in_yaml: bool = False  # the supervisor's YAML names the main process; no `-- COMMAND`
    helper: Sequence[str] = ()  # the second process of the supervisor with a plan


@dataclass(frozen=True)
class Subject:
    name: str
    executable: str

    @property
    def available(self) -> bool:
        return shutil.which(self.executable) is not None

    def argv(self, spec: RunSpec, workdir: Path) -> list[str]:
        command = list(spec.command)
        if self.name == OURS:
            argv = [self.executable]
            if spec.yaml:
                config = workdir / "supervisor.yaml"
                config.write_text(spec.yaml)
                argv += ["-c", str(config)]
            if spec.grace is not None:
                argv += ["--grace-period", f"{spec.grace:g}s"]
            return argv if spec.main_in_yaml else [*argv, "--", *command]
        if self.name in PLANS:
            config = workdir / "plan.yaml"
            config.write_text(_plan_yaml(command, spec.helper))
            if self.name == PLAN:
                _compile(self.executable, config)
            argv = [self.executable, "-c", str(config)]
            return argv + (["--grace-period", f"{spec.grace:g}s"] if spec.grace is not None else [])
        if self.name == FLOOR:
            return [self.executable, str(FLOOR_INIT), *command]
        if self.name in _C_INITS:
            return [self.executable, *_C_INITS[self.name], *command]
        if self.name == "supervisord":
            return [self.executable, "-n", "-c", str(_supervisord_ini(spec, workdir))]
        raise ValueError(f"unknown subject {self.name}")


def supervisor_executable() -> str:
    """The CLI next to this interpreter (the venv's), else the one on PATH."""
    here = Path(sys.executable).parent / "supervisor"
    return str(here) if here.exists() else shutil.which("supervisor") or "supervisor"


def subjects(names: Sequence[str], supervisor: str) -> list[Subject]:
    """The subjects called ``names``; ``supervisor`` is our CLI's path."""
    executables = {
        OURS: supervisor,
        FLOOR: floor_subject(supervisor).executable,
        "tini": "tini",
        "dumb-init": "dumb-init",
        "catatonit": "catatonit",
        "supervisord": "supervisord",
    }
    return [Subject(name, executables[name]) for name in names]


def floor_subject(supervisor: str) -> Subject:
    """The Python floor, run by the interpreter the supervisor's script names
    on its first line (the same venv, so the same start-up work), else this
    one."""
    return Subject(FLOOR, _script_interpreter(supervisor) or sys.executable)


def _script_interpreter(script: str) -> str | None:
    try:
        with open(script, "rb") as file:
            first = file.readline(4096)
    except OSError:
        return None
    words = first[2:].split() if first.startswith(b"#!") else []
    return os.fsdecode(words[0]) if words and os.path.exists(words[0]) else None


def plan_subject(supervisor: str, *, compiled: bool = True) -> Subject:
    return Subject(PLAN if compiled else PLAN_UNCOMPILED, supervisor)


def _compile(supervisor: str, config: Path) -> None:
    """``supervisor check``, as the image build runs it: it writes the
    compiled plan next to ``config``."""
    result = subprocess.run(
        [supervisor, "check", "-c", str(config)], capture_output=True, text=True, timeout=120, check=False
    )
    if result.returncode != 0 or "compiled plan written" not in result.stderr:
        raise OSError(f"supervisor check wrote no compiled plan: {result.stderr.strip() or result.returncode}")


def _plan_yaml(main: Sequence[str], helper: Sequence[str]) -> str:
    """A main process and one helper, nothing else: the smallest plan the
    orchestrator is needed for.  (JSON lists are YAML flow sequences.)"""
    if not helper:
        raise ValueError("the supervisor with a plan needs its helper's command")
    return (
        "processes:\n"
        f"  - name: main\n    main: true\n    command: {json.dumps(list(main))}\n"
        f"  - name: helper\n    command: {json.dumps(list(helper))}\n"
    )


def subject_version(subject: Subject) -> str:
    """The Debian package version of an anchor, the supervisor's own, or the
    Python version the floor runs on."""
    if subject.name == FLOOR:
        version = _output([subject.executable, "-c", "import platform; print(platform.python_version())"])
        return f"{version.strip() or 'unknown'} (benchmarks/floor_init.py on the supervisor's interpreter)"
    if subject.name == OURS:
        # From the CLI measured, which need not be this interpreter's.
        words = _output([subject.executable, "--version"]).split()
        return words[-1] if words else "unknown"
    package = {"supervisord": "supervisor"}.get(subject.name, subject.name)
    return _output(["dpkg-query", "-W", "-f=${Version}", package]).strip() or "unknown"


def _output(argv: Sequence[str]) -> str:
    """What ``argv`` prints, or nothing if it cannot run or fails."""
    import subprocess

    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return out.stdout if out.returncode == 0 else ""


# The recipe supervisord's users add so that the container ends with its main
# program: an event listener that sends SIGTERM to supervisord on that
# program's EXITED/FATAL event.
_LISTENER = textwrap.dedent(
    """\
    import os, signal, sys

    def fields(text):
        return dict(word.split(":", 1) for word in text.split())

    while True:
        sys.stdout.write("READY\\n")
        sys.stdout.flush()
        header = fields(sys.stdin.readline())
        payload = sys.stdin.read(int(header["len"]))
        body = fields(payload.split("\\n", 1)[0])
        if body.get("processname") == "main":
            os.kill(os.getppid(), signal.SIGTERM)
        sys.stdout.write("RESULT 2\\nOK")
        sys.stdout.flush()
    """
)


def _supervisord_ini(spec: RunSpec, workdir: Path) -> Path:
    import shlex

    lines = [
        "[supervisord]",
        "nodaemon=true",
        "user=root",
        f"logfile={workdir / 'supervisord.log'}",
        f"pidfile={workdir / 'supervisord.pid'}",
        f"childlogdir={workdir}",
        "",
        "[program:main]",
        f"command={shlex.join(spec.command)}",
        "autostart=true",
        "autorestart=false",
        "startsecs=0",
        "startretries=0",
        "stopsignal=TERM",
        f"stopwaitsecs={max(1, round(spec.grace)) if spec.grace is not None else 10}",
        "redirect_stderr=true",
        f"stdout_logfile={workdir / 'main.log'}",
    ]
    if spec.env:
        lines.append("environment=" + ",".join(f'{key}="{value}"' for key, value in spec.env.items()))
    if spec.exit_with_main:
        listener = workdir / "exit_listener.py"
        listener.write_text(_LISTENER)
        lines += [
            "",
            "[eventlistener:exit_on_main]",
            f"command=/usr/bin/python3 {listener}",
            "events=PROCESS_STATE_EXITED,PROCESS_STATE_FATAL",
            "stderr_logfile=" + str(workdir / "listener.log"),
        ]
    path = workdir / "supervisord.conf"
    path.write_text("\n".join(lines) + "\n")
    return path
