"""For the whole suite: every supervisor a test starts has a control socket
of its own; and ``--burn-cpu``, which keeps every core busy while the suite
runs (``make test-loaded``).

A control socket's default place, /run/supervisor/control.sock, is one file
for the whole host (PID namespaces do not separate it); with tests running
in parallel a second supervisor would find it taken and run without one.  A
short path in /tmp, as a Unix socket's address is limited to 107 bytes.

The suite runs on shared machines, where other people's work takes the
cores at any moment: a test that passes only on an idle machine fails CI at
random.  ``--burn-cpu`` makes that the normal case: it starts one busy loop
per core the suite may use, plus one, so that the scheduler never has a
core to spare for the tests and every wait, deadline and timing bound meets
a busy machine.  The burners are plain Python loops (user time, like a
compiler or another test run, not syscalls) started by the controlling
pytest process before collection; each one ends by itself after
``--burn-cpu-seconds`` and when pytest dies (the kernel's parent-death
signal), and pytest kills exactly those PIDs when it finishes, whether the
tests passed or not.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator

import pytest

# A busy loop until argv[1] seconds have passed or its parent (pytest) has
# gone.  PR_SET_PDEATHSIG is 1; checking the parent after setting it closes
# the window in which pytest could have died before.
_BURNER = r"""
import ctypes, os, signal, sys, time
ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)
if os.getppid() != int(sys.argv[2]):
    sys.exit(0)
end = time.monotonic() + float(sys.argv[1])
while time.monotonic() < end:
    pass
"""

_BURNERS = pytest.StashKey[list[subprocess.Popen[bytes]]]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("pid1-supervisor")
    group.addoption(
        "--burn-cpu",
        action="store_true",
        help="keep every core busy while the tests run: one CPU burner per core, plus one",
    )
    group.addoption(
        "--burn-cpu-seconds",
        type=float,
        default=2400.0,
        metavar="SECONDS",
        help="the burners end by themselves after this long (default 2400: longer than the suite takes)",
    )


def _cores() -> int:
    return len(os.sched_getaffinity(0))


def pytest_configure(config: pytest.Config) -> None:
    # Only the controlling process: an xdist worker has `workerinput`.
    if not config.getoption("burn_cpu") or hasattr(config, "workerinput"):
        return
    seconds = config.getoption("burn_cpu_seconds")
    burners: list[subprocess.Popen[bytes]] = []
    config.stash[_BURNERS] = burners
    for _ in range(_cores() + 1):
        burners.append(
            subprocess.Popen(
                [sys.executable, "-c", _BURNER, str(seconds), str(os.getpid())],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                # Its own process group: a Ctrl-C or a test's killpg never
                # reaches it by accident; pytest ends it by PID.
                start_new_session=True,
            )
        )


def pytest_report_header(config: pytest.Config) -> str | None:
    burners = config.stash.get(_BURNERS, [])
    if not burners:
        return None
    pids = " ".join(str(burner.pid) for burner in burners)
    return (
        f"cpu burners: {len(burners)} for {_cores()} core(s), at most {config.getoption('burn_cpu_seconds'):g}s"
        f" (pids {pids})"
    )


def pytest_unconfigure(config: pytest.Config) -> None:
    burners = config.stash.get(_BURNERS, [])
    for burner in burners:
        if burner.poll() is None:
            burner.send_signal(signal.SIGKILL)
    for burner in burners:
        burner.wait()
    burners.clear()


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Make ``--dist loadgroup`` group again.

    pytest-xdist 3.8 marks a test of an ``xdist_group`` by appending
    ``@GROUP`` to ``item._nodeid``, but pytest 9 keeps a node's id in
    ``item._id``: the suffix never reaches the scheduler, and a group's tests
    are spread over the workers (measured: a six-test group ran on both).
    This runs after xdist's hook and carries the suffix over; it does nothing
    when the two agree (older pytest, or a fixed xdist).
    """
    from _pytest.nodeid import coerce_node_id

    for item in items:
        grouped = getattr(item, "_nodeid", None)
        if isinstance(grouped, str) and hasattr(item, "_id") and grouped != item.nodeid:
            item._id = coerce_node_id(grouped)


@pytest.fixture(autouse=True)
def _own_control_socket(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    directory = tempfile.mkdtemp(prefix="sup-ctl-")
    monkeypatch.setenv("SUPERVISOR_SOCKET", os.path.join(directory, "control.sock"))
    try:
        yield
    finally:
        shutil.rmtree(directory, ignore_errors=True)
