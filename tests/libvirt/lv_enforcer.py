"""Running the enforcer in a test: start it and go on once its first pass is
over, so that whatever the test writes next can only be found by libvirt's
events (the next periodic pass is set far away)."""

from __future__ import annotations

import trio
from supervisor_libvirt._enforcer import Enforcer

__all__ = ["start_after_first_pass"]


async def start_after_first_pass(nursery: trio.Nursery, enforcer: Enforcer) -> None:
    """Start ``enforcer.run`` in ``nursery``; return when its first pass ended."""
    first_pass = trio.Event()
    resync_once = enforcer.resync

    async def noted(inner: trio.Nursery) -> None:
        await resync_once(inner)
        first_pass.set()

    enforcer.resync = noted  # type: ignore[method-assign]
    nursery.start_soon(enforcer.run)
    await first_pass.wait()
