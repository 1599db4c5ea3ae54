"""The compiled plan: written by ``supervisor check``, used by ``run`` to start
the main process before the orchestrator's imports, ignored whenever it
might not be the file's any more.

Whether ``run`` used it is seen in its DEBUG log (``main (pid N) was started
from the compiled plan``), and that PID is the one ``supervisor status``
shows; the same behaviour tests run with and without a plan.
"""

from __future__ import annotations

import marshal
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

import supervisor
from tests.control._ctl import row, wait_status
from tests.core.test_pid1 import GLIBC_RESERVED
from tests.core.test_terminal import _read_until, in_a_terminal
from tests.pid1 import SUPERVISOR, Supervisor, run, sigterm_at_start

PY = sys.executable
# The main process of most tests: says it is up, then waits on its own
# until a signal ends it (a trap runs between two sleeps).
WAITING = "echo up; while :; do sleep 0.02; done"


def _config(tmp_path: Path, main: str, extra: str = "") -> Path:
    """A main process ``sh -c MAIN`` (with ``extra`` keys) and a helper."""
    path = tmp_path / "plan.yaml"
    path.write_text(_literal_config(main, extra))
    return path


def _literal_config(main: str, extra: str) -> str:
    quoted = "'" + main.replace("'", "''") + "'"  # a YAML single-quoted scalar
    return (
        "processes:\n"
        f'  - name: main\n    main: true\n    command: ["sh", "-c", {quoted}]\n'
        + textwrap.indent(textwrap.dedent(extra), "    ")
        + '  - name: helper\n    command: ["sleep", "30"]\n'
    )


def _plan_file(config: Path, version: str = supervisor.__version__) -> Path:
    return config.parent / "__pycache__" / f"{config.name}.supervisor-{version}.plan"


def check(config: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [SUPERVISOR, "check", "-c", str(config), *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=60,
        check=False,
    )


def compile_plan(config: Path, env: dict[str, str] | None = None) -> Path:
    result = check(config, env=env)
    assert result.returncode == 0, result.stderr
    assert "compiled plan written to" in result.stderr, result.stderr
    return _plan_file(config)


def started_from_plan(sup: Supervisor) -> bool:
    """Whether ``sup`` started its main process from the compiled plan: the
    DEBUG line comes before the INFO line of the same start."""
    pid = sup.wait_for(r"started main \(pid (\d+)\)").group(1)
    return any(f"main (pid {pid}) was started from the compiled plan" in line for line in sup.stderr_lines)


@pytest.fixture(params=["compiled", "not compiled"])
def compiled(request: pytest.FixtureRequest) -> bool:
    return bool(request.param == "compiled")


def _prepare(config: Path, compiled: bool) -> None:
    if compiled:
        compile_plan(config)


# -- check --------------------------------------------------------------------------------------------


def test_check_writes_the_plan_next_to_the_file(tmp_path: Path) -> None:
    config = _config(tmp_path, WAITING)
    result = check(config)
    assert result.returncode == 0, result.stderr
    plan = _plan_file(config)
    assert result.stderr.strip() == (
        f"supervisor check: compiled plan written to {plan}: run starts the main process before loading the file"
    )
    assert "Start order" in result.stdout  # the plan is still printed, on stdout
    written = marshal.loads(plan.read_bytes())
    assert written["source"] == config.read_bytes()
    assert written["main"]["argv"] == ["sh", "-c", WAITING]
    assert plan.stat().st_mode & 0o022 == 0


def test_check_no_compile_writes_nothing(tmp_path: Path) -> None:
    config = _config(tmp_path, WAITING)
    result = check(config, "--no-compile")
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert not (tmp_path / "__pycache__").exists()


@pytest.mark.parametrize(
    ("extra", "reason"),
    [
        ("depends_on: [helper]\n", "the main process waits for helper (depends_on)"),
        ("log_prefix: true\n", "the main process's output is prefixed by the orchestrator (log_prefix)"),
        ("no_new_privs: true\n", "the main process changes its user, group, capabilities or no_new_privs"),
    ],
)
def test_check_says_why_a_main_process_is_not_compiled_and_removes_the_old_plan(
    tmp_path: Path, extra: str, reason: str
) -> None:
    config = _config(tmp_path, WAITING)
    plan = compile_plan(config)
    config.write_text(_literal_config(WAITING, extra))
    result = check(config)
    assert result.returncode == 0, result.stderr
    assert result.stderr.strip() == (
        f"supervisor check: no compiled plan (removed the one written before): {reason}, so the orchestrator starts it"
    )
    assert not plan.exists()


def test_check_compiles_nothing_when_plugins_start_first(tmp_path: Path) -> None:
    config = _config(tmp_path, WAITING)
    config.write_text(_literal_config(WAITING, "") + "plugins:\n  sleep: {seconds: 1s}\n")
    result = check(config)
    assert result.returncode == 0, result.stderr
    assert result.stderr.strip() == (
        "supervisor check: no compiled plan: plugins are configured: their start-up hooks run first, "
        "so the orchestrator starts it"
    )
    assert not (tmp_path / "__pycache__").exists()


def test_check_without_a_main_process_compiles_nothing(tmp_path: Path) -> None:
    config = tmp_path / "plan.yaml"
    config.write_text('processes:\n  - name: helper\n    command: ["sleep", "30"]\n')
    result = check(config)
    assert result.returncode == 0, result.stderr
    assert result.stderr.strip() == "supervisor check: no compiled plan: no process is `main: true`"
    assert not (tmp_path / "__pycache__").exists()


def test_check_on_a_read_only_directory_warns_and_succeeds(tmp_path: Path) -> None:
    config = _config(tmp_path, WAITING)
    # A read-only bind mount of the directory, in a mount namespace of its
    # own: read-only even for root.
    script = f'mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" && exec "$2" check -c "$1/{config.name}"'
    result = subprocess.run(
        ["unshare", "-Urm", "sh", "-c", script, "sh", str(tmp_path), SUPERVISOR],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr.strip() == (
        "supervisor check: warning: compiled plan not written "
        f"(Read-only file system: {_plan_file(config)}); run starts the main process after loading the file"
    )
    assert "Start order" in result.stdout


# -- run ----------------------------------------------------------------------------------------------


def test_run_starts_the_main_process_from_the_plan_with_the_pid_status_shows(tmp_path: Path) -> None:
    config = _config(tmp_path, WAITING)
    compile_plan(config)
    with Supervisor(["-v", "-c", str(config)]) as sup:
        pid = int(sup.wait_for(r"main \(pid (\d+)\) was started from the compiled plan").group(1))
        answer = wait_status(sup, lambda a: row(a, "helper")["state"] == "running")
        assert row(answer, "main")["pid"] == pid
        sup.signal(signal.SIGTERM)
        assert sup.wait() == 143, sup.output


def _ignored(tmp_path: Path, config: Path, env: dict[str, str] | None = None) -> Supervisor:
    """Run ``config`` to its end (the main process exits 0 once up) and
    return the supervisor, which must not have used the plan."""
    status, sup = run(["-v", "-c", str(config)], env=env)
    assert status == 0, sup.output
    assert not started_from_plan(sup), sup.output
    return sup


def test_a_plan_is_ignored_once_the_file_changed_by_one_byte(tmp_path: Path) -> None:
    config = _config(tmp_path, "echo up")
    compile_plan(config)
    config.write_bytes(config.read_bytes() + b"\n")
    _ignored(tmp_path, config)


def test_a_group_writable_plan_is_ignored(tmp_path: Path) -> None:
    config = _config(tmp_path, "echo up")
    compile_plan(config).chmod(0o664)
    _ignored(tmp_path, config)


@pytest.mark.skipif(os.geteuid() != 0, reason="giving the plan to another user needs root")
def test_a_plan_owned_by_another_user_is_ignored(tmp_path: Path) -> None:
    config = _config(tmp_path, "echo up")
    os.chown(compile_plan(config), 12345, 12345)
    _ignored(tmp_path, config)


def test_a_plan_of_another_version_is_ignored(tmp_path: Path) -> None:
    config = _config(tmp_path, "echo up")
    plan = compile_plan(config)
    written = marshal.loads(plan.read_bytes())
    plan.write_bytes(marshal.dumps({**written, "version": "0.0.1"}))
    _ignored(tmp_path, config)


def _with_main(data: bytes, **recipe: object) -> dict[str, object]:
    """The plan ``data`` with ``recipe``'s keys changed in its main process."""
    written = marshal.loads(data)
    return {**written, "main": {**written["main"], **recipe}}


@pytest.mark.parametrize(
    "spoil",
    [
        lambda data: data[:40],
        lambda data: marshal.dumps({**marshal.loads(data), "environ": {1: 2}}),
        lambda data: marshal.dumps({**marshal.loads(data), "main": {"argv": []}}),
        lambda data: marshal.dumps([1, 2]),
        lambda data: marshal.dumps({**marshal.loads(data), "salt": "not bytes"}),
        lambda data: marshal.dumps(_with_main(data, argv=["sh", ("-c", ("NOT_SET_ANYWHERE",)), "echo up"])),
        lambda data: marshal.dumps(_with_main(data, argv=["sh", ("-c", 7), "echo up"])),
    ],
    ids=["truncated", "odd variables", "odd recipe", "not a plan", "odd salt", "unset name", "odd part"],
)
def test_a_corrupt_plan_is_ignored(tmp_path: Path, spoil: Callable[[bytes], bytes]) -> None:
    config = _config(tmp_path, "echo up")
    plan = compile_plan(config)
    plan.write_bytes(spoil(plan.read_bytes()))
    _ignored(tmp_path, config)


def test_a_plan_is_ignored_when_a_variable_of_the_file_changed(tmp_path: Path) -> None:
    config = _config(tmp_path, "echo ${GREETING}")
    compile_plan(config, env={"GREETING": "compiled"})
    sup = _ignored(tmp_path, config, env={"GREETING": "now"})
    assert "now" in sup.stdout_lines, sup.output
    # The same value: the plan is used, and the command is the expanded one.
    status, sup = run(["-v", "-c", str(config)], env={"GREETING": "compiled"})
    assert status == 0, sup.output
    assert started_from_plan(sup), sup.output
    assert "compiled" in sup.stdout_lines, sup.output


def test_the_plan_holds_no_value_of_a_variable_and_the_run_puts_them_back(tmp_path: Path) -> None:
    """A build secret in ``check``'s environment must not land in the plan,
    an image layer everyone can read; the run still starts the main
    process from the plan, with the values from its own environment."""
    config = tmp_path / "plan.yaml"
    config.write_text(
        "processes:\n"
        "  - name: main\n    main: true\n"
        '    command: ["sh", "-c", "echo \\"arg=$0 env=$SEEN\\" in $PWD", "${TOKEN}"]\n'
        '    env: {SEEN: "<${TOKEN}|${SHORT}>"}\n'
        f'    cwd: "{tmp_path}/${{DIR}}"\n'
        '  - name: helper\n    command: ["sleep", "30"]\n    env: {OTHER: "${OTHER}"}\n'
    )
    (tmp_path / "work-dir-3141").mkdir()
    values = {"TOKEN": "tok-5f2b9c7e1d", "SHORT": "tok", "DIR": "work-dir-3141", "OTHER": "other-0815-secret"}
    plan = compile_plan(config, env=values).read_bytes()
    for value in values.values():
        assert value.encode() not in plan, value
    status, sup = run(["-v", "-c", str(config)], env=values)
    assert status == 0, sup.output
    assert started_from_plan(sup), sup.output
    assert f"arg=tok-5f2b9c7e1d env=<tok-5f2b9c7e1d|tok> in {tmp_path}/work-dir-3141" in sup.stdout_lines, sup.output


def test_a_plan_whose_main_process_differs_from_the_file_is_replaced(tmp_path: Path) -> None:
    # Not something check writes: a plan made by hand with the file's bytes
    # and another command.  The validated file wins.
    config = _config(tmp_path, "echo real; exit 4")
    plan = compile_plan(config)
    written = marshal.loads(plan.read_bytes())
    written["main"]["argv"] = ["sh", "-c", "exec sleep 30"]
    plan.write_bytes(marshal.dumps(written))
    status, sup = run(["-v", "-c", str(config)])
    assert status == 4, sup.output
    assert "real" in sup.stdout_lines
    assert any("started from the compiled plan is not the configuration's" in line for line in sup.stderr_lines)
    assert not started_from_plan(sup)


@pytest.mark.parametrize(
    ("mode", "code", "message"), [(None, 127, "command not found"), (0o644, 126, "not executable")]
)
def test_a_command_that_cannot_run_is_reported_as_without_a_plan(
    tmp_path: Path, mode: int | None, code: int, message: str
) -> None:
    program = tmp_path / "program"
    program.write_text("#!/bin/sh\nexit 0\n")
    program.chmod(0o755)
    config = tmp_path / "plan.yaml"
    config.write_text(f'processes:\n  - name: main\n    main: true\n    command: ["{program}"]\n')
    compile_plan(config)
    if mode is None:
        program.unlink()
    else:
        program.chmod(mode)
    status, sup = run(["-c", str(config)])
    assert status == code, sup.output
    assert f"cannot start main: {program}: " in sup.output and message in sup.output, sup.output


# -- the same behaviour with and without a plan ---------------------------------------------------------


def test_exit_code_passes_through(tmp_path: Path, compiled: bool) -> None:
    config = _config(tmp_path, "echo up; exit 3")
    _prepare(config, compiled)
    status, sup = run(["-v", "-c", str(config)])
    assert status == 3, sup.output
    assert started_from_plan(sup) == compiled
    assert "up" in sup.stdout_lines


def test_death_by_signal_is_128_plus_n(tmp_path: Path, compiled: bool) -> None:
    config = _config(tmp_path, "kill -KILL $$$$")  # ($$ is a literal $ in the file)
    _prepare(config, compiled)
    status, sup = run(["-v", "-c", str(config)])
    assert status == 128 + signal.SIGKILL, sup.output
    assert started_from_plan(sup) == compiled


def test_sigterm_runs_the_shutdown_plan_with_the_configured_stop_signal(tmp_path: Path, compiled: bool) -> None:
    config = tmp_path / "plan.yaml"
    config.write_text(
        _literal_config(f"trap 'echo got INT; exit 0' INT; {WAITING}", "stop_signal: SIGINT\n") + "grace_period: 20s\n"
    )
    _prepare(config, compiled)
    with Supervisor(["-v", "--log-format", "json", "-c", str(config)]) as sup:
        sup.wait_for("^up$", stream="stdout")
        assert started_from_plan(sup) == compiled
        sup.signal(signal.SIGTERM)
        assert sup.wait() == 0, sup.output
    assert "got INT" in sup.stdout_lines
    stops = {step["name"]: step["outcome"] for step in sup.timeline() if step["phase"] == "stop"}
    assert stops == {"main": "ok", "helper": "ok"}, sup.output


def test_other_signals_reach_the_main_process(tmp_path: Path, compiled: bool) -> None:
    config = _config(tmp_path, f"trap 'echo got USR1; exit 0' USR1; {WAITING}")
    _prepare(config, compiled)
    with Supervisor(["-v", "-c", str(config)]) as sup:
        sup.wait_for("^up$", stream="stdout")
        assert started_from_plan(sup) == compiled
        sup.signal(signal.SIGUSR1)
        assert sup.wait() == 0, sup.output
    assert "got USR1" in sup.stdout_lines


def test_the_main_process_starts_alike(tmp_path: Path, compiled: bool) -> None:
    """Environment, working directory, descriptors, signal mask and
    dispositions, process group and open-files limit: as spawn_options
    gives them."""
    report = tmp_path / "report.py"
    report.write_text(
        textwrap.dedent("""\
        import os, resource
        status = dict(line.split(":", 1) for line in open("/proc/self/status"))
        print("cwd", os.getcwd())
        print("env", os.environ.get("FROM_FILE"), os.environ.get("FROM_CALLER"))
        print("fds", " ".join(sorted(os.listdir("/proc/self/fd"), key=int)))
        print("group", os.getpgrp() == os.getpid())
        print("nofile", resource.getrlimit(resource.RLIMIT_NOFILE)[0])
        """)
    )
    workdir = tmp_path / "work"
    workdir.mkdir()
    config = tmp_path / "plan.yaml"
    # The signal mask and ignored signals the shell hands down, seen by grep
    # (Python ignores SIGPIPE and SIGXFSZ of its own); then the reporter.
    shell = f"grep -E '^Sig(Blk|Ign)' /proc/self/status; exec {PY} {report}"
    config.write_text(
        "processes:\n"
        f'  - name: main\n    main: true\n    command: ["sh", "-c", "{shell}"]\n'
        f"    cwd: {workdir}\n    env: {{FROM_FILE: file}}\n"
        '  - name: helper\n    command: ["sleep", "30"]\n'
    )
    _prepare(config, compiled)
    read_end, write_end = os.pipe()
    os.set_inheritable(write_end, True)
    try:
        status, sup = run(
            ["-v", "-c", str(config)],
            env={"FROM_CALLER": "caller"},
            pass_fds=[write_end],
            # A caller that ignores signals (as nohup does) and limits open files.
            wrap=["sh", "-c", 'trap "" HUP USR2; exec "$@"', "sh", "prlimit", "--nofile=512:4096"],
        )
    finally:
        os.close(read_end)
        os.close(write_end)
    assert status == 0, sup.output
    assert started_from_plan(sup) == compiled
    lines = dict(line.split(maxsplit=1) for line in sup.stdout_lines)
    assert lines["cwd"] == str(workdir)
    assert lines["env"] == "file caller"
    assert int(lines["SigBlk:"], 16) == 0
    assert int(lines["SigIgn:"], 16) & ~GLIBC_RESERVED == 0
    assert lines["group"] == "True"
    assert lines["nofile"] == "512"
    fds = {int(fd) for fd in lines["fds"].split()}
    # 0-2, what the caller handed down, the one listdir opened: nothing else.
    assert len(fds - {0, 1, 2, write_end}) <= 1, fds


def test_reading_the_plan_imports_nothing_the_init_layer_has_not() -> None:
    """The point of the plan: no typing, re, dataclasses, subprocess or yaml
    before the main process's exec.  The orchestrator has what PID 1
    imported (its fork); the plan's module may add only itself."""
    code = (
        "import sys\n"
        "import supervisor.pid1.orchestrated\n"
        "before = set(sys.modules)\n"
        "import supervisor._compiled\n"
        "print(' '.join(sorted(set(sys.modules) - before)))\n"
    )
    new = subprocess.run([PY, "-I", "-c", code], capture_output=True, text=True, check=True, timeout=60).stdout.split()
    assert new == ["supervisor._compiled"]
    # And whatever PID 1 happens to import, the module itself names none of them.
    source = Path(supervisor.__file__).with_name("_compiled.py").read_text()
    imported = {line.split()[1] for line in source.splitlines() if line.startswith(("import ", "from "))}
    assert imported == {"__future__", "marshal", "os", "signal", "."}, imported


@pytest.mark.parametrize("where", ["PATH", "cwd"])
def test_the_command_is_found_as_exec_finds_it(tmp_path: Path, compiled: bool, where: str) -> None:
    """On the PATH of the process's own ``env``, or relative to its ``cwd``."""
    tools = tmp_path / "tools"
    tools.mkdir()
    program = tools / "hello"
    program.write_text(f"#!/bin/sh\necho hello from {where}\n")
    program.chmod(0o755)
    keys = f'command: ["hello"]\n    env: {{PATH: "{tools}:/usr/bin:/bin"}}\n'
    if where == "cwd":
        keys = f'command: ["./hello"]\n    cwd: {tools}\n'
    config = tmp_path / "plan.yaml"
    config.write_text(f"processes:\n  - name: main\n    main: true\n    {keys}")
    _prepare(config, compiled)
    status, sup = run(["-v", "-c", str(config)])
    assert status == 0, sup.output
    assert started_from_plan(sup) == compiled
    assert sup.stdout_lines == [f"hello from {where}"]


def test_an_interactive_main_process_still_owns_the_terminal_from_its_first_read(tmp_path: Path) -> None:
    # A compiled plan cannot hand the terminal over before the exec, so an
    # interactive start takes the usual path, which does: the main process
    # reads at once without being stopped by SIGTTIN.
    config = _config(tmp_path, "read line; echo got:$line; exit 4")
    compile_plan(config)
    with in_a_terminal(["-c", str(config)]) as (controller, proc):
        os.write(controller, b"hello\n")
        output = _read_until(controller, b"got:hello", 15)
        assert b"got:hello" in output, output
        assert proc.wait(15) == 4


def test_sigterm_during_start_up_is_not_lost(tmp_path: Path, compiled: bool) -> None:
    # A SIGTERM as soon as the orchestrator exists: before or after the main
    # process was started from the plan (a pending one skips the plan), the
    # shutdown is graceful and nothing is left running.
    config = tmp_path / "plan.yaml"
    config.write_text('processes:\n  - name: main\n    main: true\n    command: ["sleep", "30"]\n')
    _prepare(config, compiled)
    status, sup = sigterm_at_start(["-c", str(config)])
    assert status == 128 + signal.SIGTERM, sup.output
    assert "shutting down: received SIGTERM" in sup.output


def test_the_digest_works_on_a_python_without_the_built_in_sha256(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fedora's and RHEL's Pythons hash through OpenSSL only: neither
    ``_sha2`` nor ``_sha256`` exists there, and reading a plan must not
    fail for it."""
    import hashlib

    from supervisor._compiled import _digest

    built_in = _digest(b"salt", "value")
    monkeypatch.setitem(sys.modules, "_sha2", None)  # None in sys.modules: ImportError
    monkeypatch.setitem(sys.modules, "_sha256", None)
    assert _digest(b"salt", "value") == built_in == hashlib.sha256(b"saltvalue").hexdigest()
