"""Secrets stay out of what the supervisor prints (issue: ``check`` showed
query-string tokens; a password with ``/`` or ``#`` made the error print
the URL whole; a password like ``12?x`` was printed; a secret substituted
into ``command`` was logged on every start)."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

from tests.control._ctl import row, wait_status, write_config
from tests.pid1 import SUPERVISOR, Supervisor
from tests.security._configs import pre_stop_request

_SECRET = "s3cr3t-VALUE"


def _check(config: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([SUPERVISOR, "check", "-c", config], capture_output=True, text=True, timeout=30, check=False)


def test_check_hides_query_values_and_passwords_also_ones_that_break_the_url(tmp_path: Path) -> None:
    config = write_config(
        tmp_path,
        f"""
        processes:
          - name: web
            command: [sleep, "60"]
            ready: {{http: "http://127.0.0.1:8080/ready?token={_SECRET}&x=1"}}
            health:
              http: "http://user:12?{_SECRET}@127.0.0.1:8080/healthz"
          - name: app
            main: true
            depends_on: [web]
            command: [sleep, "60"]
        """,
    )
    result = _check(config)
    assert result.returncode == 0, result
    assert "http://127.0.0.1:8080/ready?token=***&x=***" in result.stdout, result.stdout
    assert _SECRET not in result.stdout + result.stderr

    for broken in (f"http://user:ab/{_SECRET}@127.0.0.1:8080/", f"http://user:ab#{_SECRET}@127.0.0.1:8080/"):
        as_ready = f"""
            processes:
              - name: app
                main: true
                command: [sleep, "60"]
                ready: {{http: "{broken}"}}
            """
        for config in (write_config(tmp_path, as_ready), pre_stop_request(tmp_path, broken)):
            result = _check(config)
            assert result.returncode == 2, result
            assert _SECRET not in result.stdout + result.stderr, result.stderr
            assert result.stderr.endswith(
                "invalid URL 'http://user:***@127.0.0.1:8080/': percent-encode '/', '?', '#' and '@' "
                "in a user name or password (%2F, %3F, %23, %40)\n"
            ), result.stderr
            assert result.stderr.count("\n") == 1


def test_a_secret_substituted_into_a_command_is_not_logged(tmp_path: Path) -> None:
    config = write_config(
        tmp_path,
        """
        processes:
          - name: web
            command: [sh, -c, 'exec sleep 60', web, "--token=${TOKEN}"]
          - name: app
            main: true
            command: [sleep, "60"]
        """,
    )
    with Supervisor(["-c", config], env={"TOKEN": _SECRET}) as sup:
        answer = wait_status(sup, lambda a: row(a, "web")["state"] == "running")
        sup.wait_for(rf"started web \(pid {row(answer, 'web')['pid']}\)$")
        sup.signal(signal.SIGTERM)
        sup.wait()
    assert _SECRET not in sup.output
    assert os.environ.get("TOKEN") != _SECRET  # (the test's own environment is untouched)
