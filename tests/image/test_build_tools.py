"""`make image`'s script fails early and says what to do, without a traceback."""

from __future__ import annotations

import os
import subprocess

import pytest

from tests.image.image_tools import TOOLS


def _build_image(**env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(TOOLS / "build-image.sh")],
        env={**os.environ, "LOCAL_BASE": "0", **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        stdin=subprocess.DEVNULL,
    )


def test_an_unknown_optional_plugin_is_one_line_and_exit_2() -> None:
    result = _build_image(PLUGINS="kubernetes k8s")
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        "build-image: unknown plugin 'k8s' in PLUGINS: choose from kubernetes libvirt (the others are always included)"
    ]
    assert result.stdout == ""


@pytest.mark.podman
@pytest.mark.xdist_group("podman")
def test_a_base_that_cannot_be_pulled_explains_the_local_base() -> None:
    # Nothing listens on localhost's registry port: the pull fails at once.
    result = _build_image(BASE_IMAGE="localhost:1/pid1-supervisor-test/no-such-base:never")
    assert result.returncode == 1
    assert "cannot pull the base image localhost:1/pid1-supervisor-test/no-such-base:never" in result.stderr
    assert "LOCAL_BASE=1 make image" in result.stderr
    assert "Traceback" not in result.stderr
