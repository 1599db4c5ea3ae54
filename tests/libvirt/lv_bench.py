"""Benchmark: N real guests shut down in parallel versus one at a time.

Boots N "slow" guests (they power off 3 s after the ACPI press) on a private
libvirtd, shuts them down with the plugin (``max_parallel: 0``), boots them
again and shuts them down with ``max_parallel: 1``; reports both wall times.
For the benchmark suite (``measure()``) and by hand::

    .venv/bin/python -m tests.libvirt.lv_bench 4
"""

from __future__ import annotations

import logging
import sys
import time
from pathlib import Path

import libvirt
import trio
from supervisor_libvirt._connection import Hypervisor
from supervisor_libvirt._domains import Selection
from supervisor_libvirt._settings import LibvirtSettings
from supervisor_libvirt._shutdown import Report, shut_down_all

from supervisor import Deadline, Timeline
from tests.libvirt.lv_daemon import Libvirtd
from tests.libvirt.lv_guestimage import build
from tests.libvirt.lv_guests import Guests

CACHE = Path(__file__).resolve().parents[1] / ".artifacts" / "guest"
LOG = logging.getLogger("supervisor.plugin.libvirt")


def measure(guests: int = 4, *, flavour: str = "slow") -> dict[str, float]:
    """Seconds to shut ``guests`` guests down, in parallel and one at a time."""
    image = build(CACHE)
    daemon = Libvirtd()
    try:
        daemon.start()
        libvirt.registerErrorHandler(lambda _c, _e: None, None)
        conn = libvirt.open(daemon.uri)
        factory = Guests(conn, image, daemon.base / "console")
        results = {}
        for label, max_parallel in (("parallel", 0), ("one at a time", 1)):
            names = [f"bench-{i}" for i in range(guests)]
            for name in names:
                factory.start(name, flavour)
            factory.wait_ready(*names, timeout=120)
            results[label] = trio.run(_shut_down, daemon.uri, max_parallel)
            factory.cleanup()
        conn.close()
        return results
    finally:
        daemon.cleanup()


async def _shut_down(uri: str, max_parallel: int) -> float:
    settings = LibvirtSettings(
        uri=uri,
        selection=Selection(names=("bench-*",)),
        shutdown_timeout=120.0,
        max_parallel=max_parallel,
    )
    started = time.monotonic()
    async with Hypervisor(uri, LOG) as hv:
        outcomes = await shut_down_all(hv, settings, Deadline(600.0), Report(Timeline(), "pre_stop", "libvirt", LOG))
    if {r.outcome for r in outcomes.values()} != {"shut down"}:
        raise RuntimeError(f"not every guest shut down: {outcomes}")
    return time.monotonic() - started


if __name__ == "__main__":
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 4
    for label, seconds in measure(count).items():
        print(f"{count} guests, {label}: {seconds:.2f}s")
