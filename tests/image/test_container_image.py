"""The container image, built with `make image`'s pipeline and run for real.

podman with runc stands in for the kubelet: `podman stop -t N` sends the
image's STOPSIGNAL and SIGKILLs N seconds later, as the kubelet does at the end
of terminationGracePeriodSeconds.
"""

from __future__ import annotations

import json
import re
import shutil
import textwrap
from pathlib import Path

import pytest

from supervisor import __version__
from tests.image.image_tools import (
    ENTRYPOINT,
    ROOT,
    USER,
    VENV,
    BuiltImage,
    Containers,
    build_derived_image,
    installed_plugins,
    podman,
)

pytestmark = [pytest.mark.podman, pytest.mark.slow, pytest.mark.xdist_group("podman")]

HERE = Path(__file__).resolve().parent


def _lines_matching(logs: str, pattern: str) -> list[int]:
    return [i for i, line in enumerate(logs.splitlines()) if re.search(pattern, line)]


def _first(logs: str, pattern: str) -> int:
    found = _lines_matching(logs, pattern)
    assert found, f"no line matches {pattern!r} in:\n{logs}"
    return found[0]


def _shutdown_seconds(logs: str) -> float:
    """How long the supervisor's shutdown took, from its timeline header
    ("shutdown timeline (received SIGTERM; 0.064s of 15s)").  Measured by the
    supervisor itself, so a busy machine's slow podman does not blur it."""
    match = re.search(r"shutdown timeline \([^;]*; ([\d.]+)s of ", logs)
    assert match, f"no shutdown timeline in:\n{logs}"
    return float(match.group(1))


def _config(tmp_path: Path, text: str) -> list[str]:
    """podman options that mount ``text`` as the supervisor's configuration."""
    path = tmp_path / "supervisor.yaml"
    path.write_text(textwrap.dedent(text))
    path.chmod(0o644)  # the image's user is 65532
    return ["--volume", f"{path}:/etc/supervisor/supervisor.yaml:ro"]


# --------------------------------------------------------------------------
# The image itself
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("script", "expected"),
    [("exit 0", 0), ("exit 3", 3), ("exit 255", 255), ("kill -USR1 $$", 128 + 10)],
)
def test_the_container_exits_with_the_commands_exit_code(
    image: BuiltImage, containers: Containers, script: str, expected: int
) -> None:
    result = containers.run(image.name, "--", "sh", "-c", script)
    assert result.returncode == expected, result.stderr


def test_supervisor_version_inside(image: BuiltImage, containers: Containers) -> None:
    result = containers.run(image.name, "--version")
    assert result.returncode == 0, result.stderr
    assert __version__ in result.stdout
    # The console script on PATH, and where manifests expect it, is the same program.
    for command in ("supervisor", "/usr/local/bin/supervisor"):
        result = containers.run(image.name, "--", command, "--version")
        assert result.returncode == 0, result.stderr
        assert __version__ in result.stdout


def test_supervisor_is_pid_1_as_a_numeric_non_root_user(image: BuiltImage, containers: Containers) -> None:
    result = containers.run(image.name, "--", "sh", "-c", "id -u; id -g; tr '\\0' ' ' </proc/1/cmdline")
    assert result.returncode == 0, result.stderr
    uid, gid, pid1 = result.stdout.splitlines()
    assert (uid, gid) == ("65532", "65532")
    # The console script's first line runs the interpreter isolated (-I: no
    # PYTHONPATH, no user site) and without docstrings or asserts (-OO), so
    # PID 1's command line is that line's.
    assert pid1.split()[:3] == [f"{VENV}/bin/python3", "-IOO", ENTRYPOINT], pid1

    config = json.loads(podman("image", "inspect", image.name).stdout)[0]["Config"]
    assert config["User"] == USER
    assert config["Entrypoint"] == [ENTRYPOINT]  # exec form: no `sh -c` at PID 1
    assert config["StopSignal"] in ("SIGTERM", "15")


def test_optional_plugins_only_when_asked_for(
    image: BuiltImage, full_image: BuiltImage, containers: Containers
) -> None:
    default = containers.run(image.name, "plugins")
    assert default.returncode == 0, default.stderr
    assert {"sleep", "exec", "http"} <= installed_plugins(default.stdout), default.stdout
    assert not {"kubernetes", "libvirt"} & installed_plugins(default.stdout), default.stdout

    full = containers.run(full_image.name, "plugins")
    assert full.returncode == 0, full.stderr
    assert {"sleep", "exec", "http", "kubernetes", "libvirt"} <= installed_plugins(full.stdout)
    # Their libraries load as the image's user: the shared libraries libvirt's
    # binding links against made it into the runtime stage.
    imports = containers.run(
        full_image.name, "--", f"{VENV}/bin/python", "-c", "import kubernetes, libvirt; print('ok')"
    )
    assert (imports.returncode, imports.stdout.strip()) == (0, "ok"), imports.stderr
    no_compiler = containers.run(full_image.name, "--", "sh", "-c", "! command -v gcc")
    assert no_compiler.returncode == 0, no_compiler.stdout


def test_processes_keep_the_bases_python(image: BuiltImage, containers: Containers) -> None:
    # The supervisor's venv is its own: an app's `python3` does not see trio
    # or pluggy, and the app's packages cannot break the supervisor.
    result = containers.run(
        image.name,
        "--",
        "python3",
        "-c",
        "import sys, importlib.util as u; print(sys.prefix, u.find_spec('trio') is None)",
    )
    assert result.returncode == 0, result.stderr
    prefix, isolated = result.stdout.split()
    assert prefix != VENV
    assert isolated == "True"


def test_runtime_stage_has_no_compilers_and_no_sources(image: BuiltImage, containers: Containers) -> None:
    check = (
        "for tool in gcc cc c++ x86_64-linux-gnu-gcc make; do"
        "  command -v $tool && exit 1; "
        "done; "
        "for path in /usr/include/sys/capability.h /src /usr/local/lib/pid1-supervisor; do"
        "  test -e $path && echo $path && exit 1; "
        "done; exit 0"
    )
    result = containers.run(image.name, "--", "sh", "-c", check)
    assert result.returncode == 0, f"found in the runtime image: {result.stdout}"


def test_image_size_is_reported_and_small(image: BuiltImage) -> None:
    assert re.fullmatch(r"\S+:\S+: [\d.]+ MiB \([\d.]+ MiB on top of \S+\)", image.size_report), image.size_report
    # trio, pluggy, PyYAML, python-prctl, the built-in plugins, pip: tens of MiB.
    assert image.added_mib < 80, image.size_report


def test_python_files_are_precompiled(image: BuiltImage, containers: Containers) -> None:
    # The venv belongs to root: without .pyc files from the build, every start
    # as user 65532 would compile trio again.  Both levels: plain, and -OO
    # for the supervisor's script.
    script = textwrap.dedent(
        """
        import importlib.util, pathlib, sys, sysconfig
        site = pathlib.Path(sysconfig.get_paths()["purelib"])
        sources = list(site.rglob("*.py"))
        missing = [cached for p in sources for level in ("", 2)
                   if not pathlib.Path(cached := importlib.util.cache_from_source(str(p), optimization=level)).exists()]
        print(len(sources), len(missing))
        print("\\n".join(missing[:20]))
        """
    )
    result = containers.run(image.name, "--", f"{VENV}/bin/python", "-c", script)
    assert result.returncode == 0, result.stderr
    counted, missing = map(int, result.stdout.split()[:2])
    assert counted > 100
    assert missing == 0, result.stdout


def test_every_module_the_supervisor_imports_is_precompiled_for_its_flags(
    image: BuiltImage, containers: Containers
) -> None:
    # The base's standard library too (the official python images delete
    # every .pyc): the orchestrator's and PID 1's modules, from the stdlib
    # and the venv, each have the .pyc that PID 1's flags (-IOO) read.
    script = textwrap.dedent(
        """
        import os, sys
        import supervisor._run, supervisor._orchestrator, supervisor.control.server, supervisor.health
        import supervisor.pid1.init, supervisor._compiled, supervisor.config._source, trio
        # Frozen modules (os, codecs, ...) are in the interpreter itself.
        modules = [m for m in list(sys.modules.values())
                   if getattr(getattr(m, "__spec__", None), "has_location", False)
                   and m.__spec__.origin.endswith(".py")]
        missing = [m.__name__ for m in modules if not (m.__cached__ and os.path.exists(m.__cached__))]
        print(sys.flags.optimize, len(modules), len(missing))
        print("\\n".join(sorted(missing)[:20]))
        """
    )
    result = containers.run(image.name, "--", f"{VENV}/bin/python", "-IOO", "-c", script)
    assert result.returncode == 0, result.stderr
    optimize, counted, missing = map(int, result.stdout.split()[:3])
    assert (optimize, missing) == (2, 0), result.stdout
    assert counted > 150, result.stdout


# --------------------------------------------------------------------------
# Stopped like a pod
# --------------------------------------------------------------------------


def test_podman_stop_runs_the_shutdown_plan_in_order(image: BuiltImage, containers: Containers) -> None:
    example = ROOT / "examples" / "webapp.yaml"
    container = containers.start(
        image.name,
        "-c",
        "/etc/supervisor/webapp.yaml",
        options=["--volume", f"{example}:/etc/supervisor/webapp.yaml:ro"],
    )
    container.wait_for_log(r"metrics is ready")
    container.wait_for_log(r"started worker")

    container.stop(10)

    logs = container.logs()
    # web exits 0 on its stop signal (SIGINT); podman's SIGKILL would be 137.
    assert container.exit_code() == 0, logs
    assert _shutdown_seconds(logs) < 5, logs
    # Dependents first: worker and metrics stop (and have exited) before web
    # gets its stop signal.
    web = _first(logs, r"stopping web \(pid \d+\) with SIGINT")
    for dependent in ("worker", "metrics"):
        assert _first(logs, rf"stopping {dependent} \(pid \d+\) with SIGTERM") < web, logs
        assert _first(logs, rf"\] {dependent} \(pid \d+\) (exited|killed)") < web, logs
    assert "escalating" not in logs
    assert _first(logs, r"exiting with status 0") > web
    # The timeline: a header and one line per step, with offsets and outcomes.
    header = _first(logs, r"shutdown timeline \(received SIGTERM; [\d.]+s of 15s\)")
    timeline = logs.splitlines()[header + 1 :]
    assert any(re.search(r"\+\s*[\d.]+s\s+[\d.]+s\s+.*web.*\bok\b", line) for line in timeline), logs


def test_a_child_ignoring_sigterm_is_killed_by_the_supervisor_before_podman(
    image: BuiltImage, containers: Containers
) -> None:
    stubborn = (
        "import signal, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "print('ignoring SIGTERM', flush=True)\n"
        "time.sleep(3600)\n"
    )
    # --control: the orchestrator's path, whose escalation and timeline this reads.
    container = containers.start(image.name, "--control", "--grace-period", "2s", "--", "python3", "-c", stubborn)
    container.wait_for_log(r"^ignoring SIGTERM")

    took = container.stop(5)

    logs = container.logs()
    # The supervisor's own SIGKILL at its 2 s deadline, before podman's at
    # 5 s: it lived on to log the escalation and its timeline.
    assert container.exit_code() == 128 + 9, logs
    assert re.search(r"escalating: SIGKILL to \S+ \(pid \d+\) after the shutdown deadline", logs), logs
    # It escalates its margin (5 %: 0.1 s) before the 2 s grace period ends.
    assert 1.8 < _shutdown_seconds(logs) < 3.5, logs
    # Its last word: the orchestrator's exit, or -- when a busy machine kept
    # it from exiting in the 0.1 s between its escalation and the 2 s wall
    # -- PID 1's init layer, which ends the shutdown at the wall and says
    # that only the orchestrator itself was left (the child had been killed).
    escalated = _first(logs, r"escalating: SIGKILL")
    last = _first(
        logs,
        r"exiting with status 137|grace period \(2s\) over: SIGKILL to 1 process\(es\) still running \(orchestrator\);",
    )
    assert last > escalated, logs
    assert took > 1.8, f"podman stop returned after {took:.1f}s, before the grace period:\n{logs}"


def test_orphans_inside_the_container_leave_no_zombie(image: BuiltImage, containers: Containers) -> None:
    orphans = 20
    # Each subshell exits at once, leaving its `sleep` to PID 1 -- the
    # supervisor's init layer, which has to reap it when it dies.  The main
    # process is not a `sleep`: without a configuration PID 1 runs it
    # itself, so it too is a child of PID 1.
    script = f"for i in $(seq {orphans}); do (sleep 600 &); done; echo spawned; exec tail -f /dev/null"
    container = containers.start(image.name, "--", "sh", "-c", script)
    container.wait_for_log(r"^spawned")

    adopted = [p for p in container.processes() if p[1] == "sleep" and p[3] == 1]
    assert len(adopted) == orphans, container.processes()

    container.exec("sh", "-c", 'kill "$@"', "kill", *(str(p[0]) for p in adopted))
    table = container.processes()
    for _ in range(50):  # 10 s; reaping takes milliseconds
        if not any(p[1] == "sleep" and p[3] == 1 for p in table):
            break
        podman("exec", container.name, "sleep", "0.2")
        table = container.processes()
    assert [p for p in table if p[1] == "sleep" and p[3] == 1] == [], table
    assert [p for p in table if p[2] == "Z"] == [], table  # no zombie: every orphan reaped

    container.stop(10)
    assert container.exit_code() == 128 + 15  # tail, the main process, died of SIGTERM


# --------------------------------------------------------------------------
# A user's derived image with a third-party plugin
# --------------------------------------------------------------------------


def test_a_derived_image_runs_a_third_party_plugin_hook_on_stop(
    image: BuiltImage, containers: Containers, tmp_path: Path
) -> None:
    context = tmp_path / "context"
    shutil.copytree(
        ROOT / "examples" / "plugins" / "drain-file",
        context / "drain-file",
        ignore=shutil.ignore_patterns("tests", "__pycache__", "*.egg-info", "build", ".*"),
    )
    derived = build_derived_image(image, HERE / "derived" / "Dockerfile", context)

    listed = containers.run(derived, "plugins")
    assert listed.returncode == 0, listed.stderr
    assert "drain-file" in listed.stdout

    # The app watches for the marker that its readiness probe would check.
    app = textwrap.dedent(
        """
        import os, signal, sys, time
        marker = "/tmp/drain/draining"
        def stop(*_):
            print(f"app: SIGTERM, marker present: {os.path.exists(marker)}", flush=True)
            sys.exit(0)
        signal.signal(signal.SIGTERM, stop)
        print("app: serving", flush=True)
        seen = False
        while True:
            if os.path.exists(marker) and not seen:
                seen = True
                print("app: drain marker appeared", flush=True)
            time.sleep(0.05)
        """
    )
    options = _config(
        tmp_path,
        f"""
        grace_period: 8s
        plugins:
          drain-file:
            path: /tmp/drain/draining
            delay: 1s
        processes:
          - name: app
            main: true
            command: [python3, -c, {json.dumps(app)}]
        """,
    )
    container = containers.start(derived, "-c", "/etc/supervisor/supervisor.yaml", options=options)
    container.wait_for_log(r"^app: serving")

    container.stop(10)

    logs = container.logs()
    assert container.exit_code() == 0, logs
    assert _shutdown_seconds(logs) < 5, logs
    # pre_stop wrote the marker and waited; only then was the app stopped.
    assert _first(logs, r"^app: drain marker appeared") < _first(logs, r"^app: SIGTERM, marker present: True")
    assert _first(logs, r"removed drain marker /tmp/drain/draining") > _first(logs, r"^app: SIGTERM")
    header = _first(logs, r"shutdown timeline")
    assert any("drain-file" in line for line in logs.splitlines()[header + 1 :]), logs
