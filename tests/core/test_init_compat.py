"""What dumb-init's and tini's own test suites found, and the options their
users rely on: each as the real CLI, as PID 1 or as a subreaper."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.pid1 import SUPERVISOR, Supervisor, pid_alive, run, wait_until

PY = sys.executable


def test_subreaper_sweep_terms_grandchildren_that_re_parent(tmp_path: Path) -> None:
    # dumb-init's test: the grandchild traps TERM and must get it (and the
    # exit must not wait for the grace period).
    # The main process exits once the grandchild says its trap is set (a
    # FIFO: no guessing how long a busy machine takes to get there).  The
    # grace period is long so that "did not wait for it" has a bound a
    # loaded machine meets: four interpreter start-ups at a load average of
    # 25 on 2 cores took 4.6 s.
    marker = tmp_path / "termed"
    trapped = tmp_path / "trapped"
    os.mkfifo(trapped)
    grand = tmp_path / "grand.sh"
    grand.write_text(f"trap 'echo term > {marker}; exit 0' TERM\necho > {trapped}\nwhile :; do sleep 0.05; done\n")
    started = time.monotonic()
    code, sup = run(
        ["--grace-period", "60s", "--", "sh", "-c", f'sh -c "sh {grand}; :" & read _ < {trapped}'],
        pid1=False,
        timeout=30,
    )
    took = time.monotonic() - started
    assert code == 0, sup.output
    assert marker.read_text().strip() == "term", sup.output
    assert took < 30.0, (took, sup.output)


def test_a_stop_signal_dropped_by_rewrite_is_not_a_second_one(tmp_path: Path) -> None:
    # The main process finishes its stop only once the test has seen the
    # SIGINT dropped, so the SIGINT surely lands during the shutdown.
    go = tmp_path / "go"
    exit_when_told = (
        "import os, signal, sys, time\n"
        f"def stop(*_):\n    while not os.path.exists({str(go)!r}): time.sleep(0.01)\n    sys.exit(0)\n"
        "signal.signal(signal.SIGTERM, stop)\nprint('ready', flush=True)\ntime.sleep(60)\n"
    )
    with Supervisor(["-v", "--rewrite", "INT:0", "--", PY, "-c", exit_when_told]) as sup:
        sup.wait_for("^ready$", stream="stdout")
        sup.signal(signal.SIGTERM)
        sup.wait_for("stopping")
        sup.signal(signal.SIGINT)
        sup.wait_for("received SIGINT: dropped")
        go.write_text("")
        assert sup.wait() == 0, sup.output
    assert "again" not in sup.output
    assert "received SIGINT: dropped (--rewrite)" in sup.output


def test_rewriting_job_control_signals_is_rejected() -> None:
    for source in ("TSTP", "TTIN", "TTOU", "CHLD"):
        code, sup = run(["--rewrite", f"{source}:TERM", "--", "true"])
        assert code == 2, sup.output
        assert len(sup.stderr_lines) == 1, sup.output
        assert f"SIG{source} is never forwarded, so it cannot be rewritten" in sup.stderr_lines[0]


def test_a_signal_before_the_main_process_runs_is_delivered_once_it_does(tmp_path: Path) -> None:
    # A main process behind a dependency is not running for a while; a HUP
    # then (tini and dumb-init: 129 at once) must not be lost.
    # dep becomes ready only when the test says so: after the HUP is queued.
    config = tmp_path / "deploy.yaml"
    dep_ready = tmp_path / "dep-ready"
    config.write_text(
        "processes:\n"
        f"  - name: dep\n    command: [sleep, '60']\n    ready: {{file: {dep_ready}, timeout: 60s}}\n"
        "  - name: app\n    main: true\n    depends_on: [dep]\n    command: [sleep, '30']\n"
    )
    with Supervisor(["--log-level", "debug", "-c", str(config)]) as sup:
        sup.wait_for("started dep")
        sup.signal(signal.SIGHUP)
        sup.wait_for("received SIGHUP before app runs: queued")
        dep_ready.write_text("")
        assert sup.wait(timeout=20) == 128 + signal.SIGHUP, sup.output
    assert "not forwarded" not in sup.output


def test_a_signal_in_the_first_milliseconds_is_not_lost() -> None:
    with Supervisor(["--", "sleep", "30"]) as sup:
        pid = sup.pid
        wait_until(lambda: Path(f"/proc/{pid}/task/{pid}/children").read_text().strip(), interval=0.0002)
        sup.signal(signal.SIGHUP)
        assert sup.wait(timeout=20) == 128 + signal.SIGHUP, sup.output


def test_expected_exit_codes_are_remapped_to_zero() -> None:
    code, sup = run(["-e", "143", "--", PY, "-c", "import sys; sys.exit(143)"])
    assert code == 0, sup.output
    code, sup = run(["-e", "143", "--", PY, "-c", "import sys; sys.exit(3)"])
    assert code == 3, sup.output
    code, sup = run(["-e", "256", "--", "true"])
    assert code == 2 and "invalid exit code '256'" in sup.output


def test_parent_death_signal_when_not_pid1(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    # A parent that starts the supervisor and dies.
    script = (
        "import subprocess, sys\n"
        f"p = subprocess.Popen([{SUPERVISOR!r}, '-p', 'TERM', '--', 'sleep', '60'])\n"
        f"open({str(pid_file)!r}, 'w').write(str(p.pid))\n"
    )
    parent = subprocess.Popen([PY, "-c", script + "import time; time.sleep(1)"])
    wait_until(lambda: pid_file.exists() and pid_file.read_text(), timeout=10)
    supervisor = int(pid_file.read_text())
    assert parent.wait(10) == 0
    died = time.monotonic()
    wait_until(lambda: not pid_alive(supervisor), timeout=10)
    assert time.monotonic() - died < 5


def test_log_level_on_the_command_line_silences_info_lines() -> None:
    code, sup = run(["--log-level", "warning", "--", "true"])
    assert code == 0
    assert sup.stderr_lines == [], sup.output
    code, sup = run(["--log-level", "warning", "--", "sh", "-c", "exit 7"])
    assert code == 7
    assert not any(" INFO " in line for line in sup.stderr_lines), sup.output
