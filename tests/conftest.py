"""For the whole suite: every supervisor a test starts has a control socket
of its own.

Its default place, /run/supervisor/control.sock, is one file for the whole
host (PID namespaces do not separate it); with tests running in parallel a
second supervisor would find it taken and run without one.  A short path
in /tmp, as a Unix socket's address is limited to 107 bytes.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def _own_control_socket(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    directory = tempfile.mkdtemp(prefix="sup-ctl-")
    monkeypatch.setenv("SUPERVISOR_SOCKET", os.path.join(directory, "control.sock"))
    try:
        yield
    finally:
        shutil.rmtree(directory, ignore_errors=True)
