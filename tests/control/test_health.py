"""Health checks that restart, `supervisor health`, and the probe listener
through a real HTTP client, the supervisor as PID 1 of a PID namespace."""

from __future__ import annotations

import re
import signal
import socket
import urllib.error
import urllib.request
from pathlib import Path

from tests.control._ctl import ctl, row, status, wait_status, write_config
from tests.pid1 import Supervisor


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def test_a_failing_check_restarts_its_process_through_the_backoff(tmp_path: Path) -> None:
    healthy = tmp_path / "healthy"
    healthy.touch()
    config = write_config(
        tmp_path,
        f"""
        processes:
          - name: web
            command: ["sleep", "60"]
            backoff: {{initial: 400ms, max: 400ms, max_restarts: 2, window: 60s}}
            on_failure: ignore
            health:
              exec: [test, -e, {healthy}]
              # Each probe may take the whole period: long enough that a
              # busy machine's slow fork is not taken for a failure.
              period: 300ms
              threshold: 3
          - name: app
            main: true
            command: ["sleep", "60"]
        """,
    )
    with Supervisor(["-c", config]) as sup:
        first = wait_status(sup, lambda a: row(a, "web")["checks"][0]["up"] is True)
        app_pid = row(first, "app")["pid"]
        healthy.unlink()
        sup.wait_for(r"restarting web: health check web failed 3 time\(s\) in a row \(exited with 1\)")
        # Through the restart policy (restart: never notwithstanding) and its
        # backoff; still failing, restarted until the backoff's limit, then
        # failed for good.  (Each run is up for a moment only: the log tells
        # the story, the status the outcome.)
        failed = wait_status(sup, lambda a: row(a, "web")["state"] == "failed", timeout=30)
        assert row(failed, "web")["restarts"] == 2
        assert row(failed, "web")["last_exit"] == "killed by SIGTERM (exit code 143)"  # ended by the check
        assert row(failed, "app")["pid"] == app_pid and row(failed, "app")["state"] == "running"
        # on_failure: ignore: the pod goes on without it, so the kubelet
        # must not restart the container for it (the status says it failed).
        assert failed["alive"]
        delays = [int(ms) for ms in re.findall(r"restarting web in (\d+)ms", sup.output)]
        assert len(delays) == 2 and all(200 <= ms <= 400 for ms in delays), sup.output  # 400ms, equal jitter
        pids = re.findall(r"started web \(pid (\d+)\)", sup.output)
        assert len(set(pids)) == 3, sup.output
        assert sup.output.count("restarting web: health check web failed 3 time(s)") == 3
        result = ctl(sup, "health", "--level", "alive")
        assert result.returncode == 0
        assert result.stdout.strip() == "alive: ok"
        sup.signal(signal.SIGTERM)
        sup.wait()


def test_probe_listener_answers_livez_readyz_metrics_also_during_the_shutdown(tmp_path: Path) -> None:
    port = _free_port()
    ready_file, release = tmp_path / "ready", tmp_path / "release"
    config = write_config(
        tmp_path,
        f"""
        grace_period: 20s
        health:
          listen: 127.0.0.1:{port}
          checks:
            - name: upstream
              exec: [test, -e, {ready_file}]
              level: ready
              period: 300ms  # (see above: a probe may take the period)
              threshold: 1
        processes:
          - name: app
            main: true
            command:
              - sh
              - -c
              - "trap 'while [ ! -e {release} ]; do sleep 0.05; done; exit 0' TERM; echo up; while :; do sleep 1; done"
        """,
    )
    with Supervisor(["-c", config]) as sup:
        sup.wait_for("^up$", stream="stdout")
        wait_status(sup, lambda a: a["checks"][0]["up"] is False)
        code, body = _get(port, "/readyz")
        assert code == 503 and body.startswith("ready: failing\ncheck upstream: failed"), body
        assert body.endswith(": exited with 1\n") and body.count("\n") == 2, body
        assert _get(port, "/livez") == (200, "alive: ok\n")  # a ready-level check only
        assert ctl(sup, "health").returncode == 1
        ready_file.touch()
        wait_status(sup, lambda a: a["ready"])
        assert _get(port, "/readyz") == (200, "ready: ok\n")
        assert ctl(sup, "health").stdout == "ready: ok\n"

        code, metrics = _get(port, "/metrics")
        assert code == 200
        assert 'supervisor_process_up{process="app"} 1' in metrics.splitlines()
        assert 'supervisor_health_check_up{check="upstream",level="ready"} 1' in metrics.splitlines()
        assert "# TYPE supervisor_process_restarts_total counter" in metrics
        assert _get(port, "/nope")[0] == 404

        sup.signal(signal.SIGTERM)
        wait_status(sup, lambda a: a["shutdown"] is not None)
        assert _get(port, "/readyz") == (503, "ready: failing\nshutting down: received SIGTERM\n")
        assert _get(port, "/livez") == (200, "alive: ok\n")
        code, metrics = _get(port, "/metrics")
        assert "supervisor_shutdown_in_progress 1" in metrics.splitlines()
        assert any(line.startswith('supervisor_shutdown_phase_seconds{phase="stop"}') for line in metrics.splitlines())
        release.touch()
        assert sup.wait() == 0


def test_a_check_with_on_failure_shutdown_ends_the_container(tmp_path: Path) -> None:
    config = write_config(
        tmp_path,
        f"""
        health:
          checks:
            - name: disk
              exec: [test, -e, {tmp_path / "missing"}]
              period: 100ms
              threshold: 2
              on_failure: shutdown
        processes:
          - name: app
            main: true
            command: ["sleep", "60"]
        """,
    )
    with Supervisor(["-c", config]) as sup:
        assert sup.wait() == 70
    assert "health check disk failed 2 time(s) in a row (exited with 1); shutting down" in sup.output


def test_status_names_the_checks(tmp_path: Path) -> None:
    config = write_config(
        tmp_path,
        f"""
        processes:
          - name: app
            main: true
            command: ["sleep", "60"]
            health:
              tcp: 127.0.0.1:{_free_port()}
              period: 100ms
              threshold: 2
              on_failure: ignore
        """,
    )
    with Supervisor(["-c", config]) as sup:
        wait_status(sup, lambda a: row(a, "app")["checks"][0]["up"] is False)
        text = ctl(sup, "status").stdout
        assert "app: down (" in text and "connection refused" in text
        assert status(sup)["alive"] is False
