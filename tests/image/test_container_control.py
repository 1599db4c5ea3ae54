"""`kubectl exec POD -- supervisor status` as podman exec into the real image:
the CLI finds the socket by default as the image's non-root user, root finds
it too, and any other user gets one clear line."""

from __future__ import annotations

import json
import subprocess
import time

import pytest

from tests.image.image_tools import BuiltImage, Container, Containers, podman

pytestmark = [pytest.mark.podman, pytest.mark.slow, pytest.mark.xdist_group("podman")]


def test_supervisor_status_through_exec_as_the_images_user(image: BuiltImage, containers: Containers) -> None:
    # --control: without a configuration PID 1 runs the command itself, with no socket.
    container = containers.start(image.name, "--control", "--", "sh", "-c", "echo hello from main; exec sleep 300")
    container.wait_for_log("hello from main")
    result = _status_once_the_socket_is_up(container)
    assert result.returncode == 0, result.stderr
    answer = json.loads(result.stdout)
    (main,) = answer["processes"]
    assert (main["name"], main["state"], main["main"]) == ("sh", "running", True)
    assert answer["ready"] and answer["alive"]
    # The command after -- writes to the container's stdout itself, as under tini.
    logs = podman("exec", container.name, "supervisor", "logs", "sh", check=False)
    assert logs.returncode == 1 and "sh's output is not captured" in logs.stderr
    assert podman("exec", container.name, "supervisor", "health", "-q").returncode == 0
    # The socket went where the non-root user can make it, and root finds it there.
    assert podman("exec", container.name, "ls", "/tmp/supervisor-65532/control.sock").returncode == 0
    assert podman("exec", "--user", "0", container.name, "supervisor", "status").returncode == 0
    stranger = podman("exec", "--user", "1234", container.name, "supervisor", "status", check=False)
    assert stranger.returncode == 1
    assert stranger.stderr.strip() == (
        "supervisor status: no control socket at /run/supervisor/control.sock or "
        "/tmp/supervisor-1234/control.sock: is the supervisor running here? "
        "(a socket configured elsewhere: --socket PATH or SUPERVISOR_SOCKET=PATH)"
    )
    other = podman(
        "exec", "--user", "1234", container.name, "supervisor", "status",
        "--socket", "/tmp/supervisor-65532/control.sock", check=False,
    )  # fmt: skip
    assert other.returncode == 1
    assert "permission denied" in other.stderr and other.stderr.count("\n") == 1


def _status_once_the_socket_is_up(container: Container, timeout: float = 30.0) -> subprocess.CompletedProcess[str]:
    """``supervisor status -o json`` once the control socket is there.

    The command after ``--`` starts before the orchestrator imports trio and
    opens its socket (so that it starts fast), so its first output line can
    come before the socket exists; on a busy machine, seconds before.
    """
    give_up = time.monotonic() + timeout
    while True:
        result = podman("exec", container.name, "supervisor", "status", "-o", "json", check=False)
        if result.returncode == 0 or time.monotonic() > give_up:
            return result
        time.sleep(0.2)  # the poll's interval; each exec costs more than that
