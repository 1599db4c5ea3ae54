"""What an idle orchestrator with a plan keeps out of its memory, seen from
outside: the real CLI as PID 1 of a PID namespace, a plan of two processes,
the orchestrator's /proc/PID/maps read while it idles.  Each module left out
must still load, and work, the moment it is used."""

from __future__ import annotations

import contextlib
import gc
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from supervisor.pid1.options import RunOptions
from tests.control._ctl import ctl, row, status
from tests.pid1 import Supervisor

PLAN = """
processes:
  - {name: app, main: true, command: [sleep, "1000"]}
  - {name: helper, command: [sleep, "1001"]}
"""

# C extensions (so files in maps) that only some work needs: PyYAML and what
# its constructor imports (the file is parsed by a short-lived child), the
# control socket's json (its first request), TLS and hashing (trio's, deferred),
# compression (shutil's, deferred) and attrs' unicodedata (deferred).
NOT_LOADED = ("_yaml", "_datetime", "_json", "_ssl", "_hashlib", "_bz2", "_lzma", "zlib", "unicodedata")


def _children(pid: int) -> list[int]:
    """Every thread's children: trio starts processes from worker threads."""
    children = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(FileNotFoundError):  # a thread that just ended
            children += [int(p) for p in (task / "children").read_text().split()]
    return children


def _extensions(pid: int) -> set[str]:
    """The C extensions mapped into ``pid``, by module name."""
    names = set()
    for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
        path = line.split()[-1]
        if path.endswith(".so") and ".cpython-" in path:
            names.add(os.path.basename(path).split(".cpython-")[0])
    return names


def test_an_idle_orchestrator_has_not_loaded_what_it_has_not_used(tmp_path: Path) -> None:
    path = tmp_path / "plan.yaml"
    path.write_text(textwrap.dedent(PLAN))
    with Supervisor(["-c", str(path)]) as sup:
        sup.wait_for(r"started helper \(pid")
        sup.wait_for(r"started app \(pid")
        (orchestrator,) = _children(sup.pid)
        assert len(_children(orchestrator)) == 2  # the parse's child is gone, both processes run
        loaded = _extensions(orchestrator)
        assert "_socket" in loaded  # the reading works: trio's own are there
        assert sorted(set(NOT_LOADED) & loaded) == []

        # The control socket answers its first request, with json loaded then.
        answer = status(sup)
        assert row(answer, "helper")["state"] == "running" and row(answer, "app")["state"] == "running"
        assert "_json" in _extensions(orchestrator)
        # The re-plan's code, and PyYAML, load with the first replan.
        result = ctl(sup, "replan", "--dry-run")
        assert result.returncode == 0, result.stderr
        assert "= helper: unchanged, left alone" in result.stdout.splitlines()
        assert "_yaml" in _extensions(orchestrator)

        sup.signal(signal.SIGTERM)
        assert sup.wait() == 143


def test_the_orchestrator_freezes_the_objects_it_inherits() -> None:
    """Its first act in the forked child: what it inherited from PID 1 goes
    to the collector's permanent generation (so no collection copies the
    pages it shares with PID 1)."""
    from supervisor import _run
    from supervisor.pid1 import orchestrated

    read_end, write_end = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    child = os.fork()
    if child == 0:  # pragma: no cover - the forked orchestrator's stand-in
        code = 1
        try:
            os.close(read_end)
            gc.unfreeze()  # whatever this test process did before
            frozen_before = gc.get_freeze_count()

            def run_main(options: RunOptions, **_: object) -> int:
                os.write(write_end, f"{frozen_before} {gc.get_freeze_count()}".encode())
                return 0

            _run.run_main = run_main  # type: ignore[assignment]
            code = orchestrated._orchestrator_child(RunOptions(), -1, ())
        finally:
            os._exit(code)
    os.close(write_end)
    with os.fdopen(read_end) as pipe:
        report = pipe.read()
    _, wait_status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(wait_status) == 0
    before, after = map(int, report.split())
    assert before == 0 and after > 1000


def test_the_orchestrator_does_not_import_argparse() -> None:
    """The orchestrator keeps what it imports for the pod's life; its command
    line arrived parsed, so argparse (with gettext) would be dead weight."""
    code = (
        "import sys\n"
        "import supervisor._run, supervisor._orchestrator, supervisor.config\n"
        "import supervisor.control.server, supervisor.health\n"
        "print(sorted(m for m in ('argparse', 'gettext', 'supervisor.cli') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.strip() == "[]"


def test_privileges_are_worked_out_only_for_a_process_that_changes_them() -> None:
    """The privileges module (python-prctl's capability tables with it) loads
    when a process names a user, a group, capabilities or no_new_privs, and
    not for the many that keep the supervisor's own."""
    code = (
        "import sys\n"
        "from supervisor._run import _check_privileges\n"
        "from supervisor.config import Config, ProcessSpec\n"
        "from supervisor.runtime.spawn import spawn_options\n"
        "plain = ProcessSpec(name='plain', command=('true',), main=True)\n"
        "_check_privileges(Config(processes=(plain,)))\n"
        "spawn_options(plain)\n"
        "print('supervisor.runtime.privileges' in sys.modules)\n"
        "locked = ProcessSpec(name='locked', command=('true',), no_new_privs=True)\n"
        "_check_privileges(Config(processes=(plain, locked)))\n"
        "print('supervisor.runtime.privileges' in sys.modules, spawn_options(locked).preexec_fn is not None)\n"
    )
    out = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.split() == ["False", "True", "True"]
