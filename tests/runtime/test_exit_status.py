"""ExitStatus: decoded from real wait statuses and return codes, compared
and hashed by value, immutable (the init layer's reaper and the
orchestrator's runs produce the same values for the same ends)."""

from __future__ import annotations

import copy
import os
import pickle
import signal
import subprocess

import pytest

from supervisor import ExitStatus


def raw_wait_status(argv: list[str]) -> tuple[int, int]:
    """The raw ``waitpid`` status of a real child, and its Popen-style code."""
    child = subprocess.Popen(argv)
    _, status = os.waitpid(child.pid, 0)
    return status, os.waitstatus_to_exitcode(status)


@pytest.mark.parametrize(
    ("argv", "expected", "exit_code", "text"),
    [
        (["true"], ExitStatus(code=0), 0, "exited with code 0"),
        (["sh", "-c", "exit 3"], ExitStatus(code=3), 3, "exited with code 3"),
        (["sh", "-c", "kill -TERM $$"], ExitStatus(signal=signal.SIGTERM), 143, "killed by SIGTERM (exit code 143)"),
        (["sh", "-c", "kill -KILL $$"], ExitStatus(signal=signal.SIGKILL), 137, "killed by SIGKILL (exit code 137)"),
    ],
)
def test_wait_status_and_returncode_decode_alike(
    argv: list[str], expected: ExitStatus, exit_code: int, text: str
) -> None:
    status, returncode = raw_wait_status(argv)
    decoded = ExitStatus.from_wait_status(status)
    assert decoded == expected == ExitStatus.from_returncode(returncode)
    assert decoded.exit_code == exit_code
    assert str(decoded) == text
    assert decoded.success is (exit_code == 0)


def test_values_compare_hash_copy_and_pickle_by_value() -> None:
    status = ExitStatus(code=1)
    assert status == ExitStatus(1) and status != ExitStatus(signal=1) and status != (1, None)
    assert len({status, ExitStatus(code=1), ExitStatus(signal=9)}) == 2
    assert copy.copy(status) == status == pickle.loads(pickle.dumps(status))
    assert repr(status) == "ExitStatus(code=1, signal=None)"
    match ExitStatus(signal=15):
        case ExitStatus(None, signo):
            assert signo == 15
        case _:
            pytest.fail("ExitStatus does not match positionally")


def test_immutable() -> None:
    status = ExitStatus(code=0)
    with pytest.raises(AttributeError, match="immutable"):
        status.code = 1  # type: ignore[misc]
    with pytest.raises(AttributeError, match="immutable"):
        del status.signal
    assert status == ExitStatus(code=0)
