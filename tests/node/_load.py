"""The load generator (``loadgen.py``) run inside a network namespace: an
open-loop stream of requests to a Service's ClusterIP, each on a new
connection, every outcome accounted for.

    load = Load.start(netns, workdir / "load", url, rate=100, count=3000, max_seconds=30)
    load.started()
    ...
    load.stop()
    report = load.result(timeout=30)   # {"settings": ..., "requests": [...]}
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ._netns import NETNS_DIR

__all__ = ["LOADGEN", "REQUEST_TIMEOUT", "Load"]

LOADGEN = Path(__file__).resolve().parent / "loadgen.py"
REQUEST_TIMEOUT = 2.0  # connect included


@dataclass
class Load:
    """One run of ``loadgen.py``."""

    proc: subprocess.Popen[bytes]
    out: Path
    log: Path

    @classmethod
    def start(cls, netns: str, stem: Path, url: str, *, rate: float, count: int, max_seconds: float) -> Load:
        """Start it in ``netns`` (this interpreter and its trio; the script
        imports nothing else), each request given ``REQUEST_TIMEOUT``; its
        report goes to ``stem``.json."""
        out, log = stem.with_suffix(".json"), stem.with_suffix(".log")
        argv = [
            "nsenter",
            f"--net={NETNS_DIR / netns}",
            sys.executable,
            str(LOADGEN),
            url,
            f"--rate={rate:g}",
            f"--count={count}",
            f"--max-seconds={max_seconds:g}",
            f"--timeout={REQUEST_TIMEOUT:g}",
            f"--out={out}",
        ]
        with log.open("wb") as stream:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=stream, stderr=subprocess.STDOUT)
        return cls(proc, out, log)

    def started(self, timeout: float = 30) -> None:
        end = time.monotonic() + timeout
        while not self.out.with_suffix(".started").exists():
            if self.proc.poll() is not None or time.monotonic() > end:
                raise RuntimeError(f"the load generator did not start:\n{self.log.read_text(errors='replace')}")
            time.sleep(0.02)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)

    def result(self, timeout: float) -> dict[str, Any]:
        """Wait for the generator to finish (stopped or done); its report."""
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise RuntimeError(f"the load generator did not finish in {timeout:g}s") from None
        if self.proc.returncode != 0 or not self.out.exists():
            raise RuntimeError(
                f"the load generator failed ({self.proc.returncode}):\n{self.log.read_text(errors='replace')}"
            )
        data: dict[str, Any] = json.loads(self.out.read_text())
        return data

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
