"""A child cannot make the supervisor buffer an endless line (issue:
``log_prefix: true`` held a line without a newline whole: 100 MB cost
54 s of CPU and 222 MB)."""

from __future__ import annotations

import re
import signal
import time
from pathlib import Path

from supervisor.runtime.output import LINE_LIMIT
from tests.control._ctl import ctl, write_config
from tests.pid1 import Supervisor

_MEGABYTES = 48


def _peak_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM")


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100  # utime + stime, in clock ticks of 1/100 s


def test_an_endless_line_is_cut_at_a_fixed_length_in_bounded_memory(tmp_path: Path) -> None:
    total = _MEGABYTES << 20
    config = write_config(
        tmp_path,
        f"""
        processes:
          - name: spew
            log_prefix: true
            command: [sh, -c, "echo before; head -c {total} /dev/zero | tr '\\\\0' x; echo; echo after; exec sleep 600"]
          - name: app
            main: true
            command: [sleep, "600"]
        """,
    )
    with Supervisor(["-c", config]) as sup:
        sup.wait_for(r"^\[spew\] before$", stream="stdout")
        orchestrator = int(Path(f"/proc/{sup.pid}/task/{sup.pid}/children").read_text().split()[0])
        baseline = _peak_kib(orchestrator)
        started = time.monotonic()
        # 48 MB through the pump and the test's own reader: about 1 s idle;
        # once more than 120 s, on a machine busy with the real-node tests.
        sup.wait_for(r"^\[spew\] after$", stream="stdout", timeout=400)
        peak, cpu = _peak_kib(orchestrator), _cpu_seconds(orchestrator)
        pieces = [line for line in sup.stdout_lines if line.startswith("[spew] ") and "x" in line]
        cut_marker = f" [cut: line longer than {LINE_LIMIT} bytes, continued below]"
        longest = len("[spew] [continued] ") + LINE_LIMIT + len(cut_marker)
        assert all(len(line) <= longest for line in pieces)
        assert pieces[0] == "[spew] " + "x" * LINE_LIMIT + cut_marker
        assert pieces[1].startswith("[spew] [continued] xxx")
        assert pieces[-1] == "[spew] [continued] " + "x" * (total % LINE_LIMIT or LINE_LIMIT)
        # Every byte arrived, but for whole pieces dropped (and counted) when
        # the test's reader fell behind: none were held back.
        arrived = sum(line.count("x") for line in pieces)
        dropped = sum(int(n) for n in re.findall(r"(\d+) line\(s\) of output dropped", sup.output))
        assert total - LINE_LIMIT <= arrived + dropped * LINE_LIMIT and arrived <= total, (arrived, dropped)
        # Memory: what the output queue may hold, not what the line is long.
        assert peak - baseline < 24 * 1024, (baseline, peak)
        assert ctl(sup, "status").returncode == 0
        sup.signal(signal.SIGTERM)
        sup.wait()
    print(f"{_MEGABYTES} MB: {time.monotonic() - started:.1f}s, orchestrator CPU {cpu:.1f}s, peak {peak} KiB")
