"""``user:`` alone is the safe choice (issue: a child as uid 1000 ran a
setuid-root binary and got euid 0; HOME=/root was inherited and USER and
LOGNAME were unset)."""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.control._ctl import wait_status, write_config
from tests.pid1 import Supervisor

pytestmark = pytest.mark.skipif(os.getuid() != 0, reason="changes users: needs root")


@pytest.fixture
def setuid_id() -> Iterator[Path]:
    """A setuid-root copy of ``id`` where ``nobody`` can run it."""
    directory = Path(tempfile.mkdtemp(prefix="sup-suid-", dir="/tmp"))
    directory.chmod(0o755)
    binary = directory / "id"
    shutil.copy("/usr/bin/id", binary)
    binary.chmod(0o4755)
    try:
        yield binary
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _host_pid(sup: Supervisor, namespace_pid: int) -> int:
    """The PID, as the test sees it, of the supervisor's descendant that is
    ``namespace_pid`` in its PID namespace."""
    todo = [sup.pid]
    while todo:
        pid = todo.pop()
        if int(_status_fields(pid)["NSpid"].split()[-1]) == namespace_pid:
            return pid
        # Every thread's children: trio forks from worker threads.
        for task in Path(f"/proc/{pid}/task").iterdir():
            todo += [int(child) for child in (task / "children").read_text().split()]
    raise AssertionError(f"no process {namespace_pid} in the namespace")


def _status_fields(pid: int) -> dict[str, str]:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        fields[key] = value.strip()
    return fields


def test_user_alone_drops_capabilities_sets_no_new_privs_and_the_login_environment(
    tmp_path: Path, setuid_id: Path
) -> None:
    opened = setuid_id.parent / "reports"  # where nobody can write (pytest's tmp is root's only)
    opened.mkdir()
    opened.chmod(0o777)
    script = (
        f'{{ {setuid_id} -u; echo "$HOME $USER $LOGNAME"; }} > {opened}/@WHO@.tmp; '
        f"mv {opened}/@WHO@.tmp {opened}/@WHO@; exec sleep 120"
    )
    config = write_config(
        tmp_path,
        f"""
        processes:
          - name: plain
            user: nobody
            command: [sh, -c, '{script.replace("@WHO@", "plain")}']
          - name: asked-otherwise  # the file says otherwise: as before
            user: nobody
            no_new_privs: false
            capabilities: {{drop: []}}
            env: {{HOME: /srv}}
            command: [sh, -c, '{script.replace("@WHO@", "asked-otherwise")}']
          - name: app
            main: true
            command: [sleep, "120"]
        """,
    )
    # Real root (no user namespace), as in a container.
    with Supervisor(["-c", config], user_namespace=False, env={"HOME": "/root", "USER": "root"}) as sup:
        answer = wait_status(sup, lambda a: (opened / "plain").exists() and (opened / "asked-otherwise").exists())
        pids = {p["name"]: _host_pid(sup, p["pid"]) for p in answer["processes"]}
        nobody = "65534"
        assert (opened / "plain").read_text().split("\n")[:2] == [nobody, "/nonexistent nobody nobody"]
        plain = _status_fields(pids["plain"])  # the sleep it became
        assert plain["NoNewPrivs"] == "1"
        assert int(plain["CapBnd"], 16) == 0 and int(plain["CapInh"], 16) == 0
        # The setuid binary made it root: what the file asked for.
        assert (opened / "asked-otherwise").read_text().split("\n")[:2] == ["0", "/srv nobody nobody"]
        other = _status_fields(pids["asked-otherwise"])
        assert other["NoNewPrivs"] == "0" and int(other["CapBnd"], 16) != 0
        sup.signal(signal.SIGTERM)
        sup.wait()
