"""At start-up, bring back the guests this plugin saved, all at once.

``mode: managedsave`` marks each guest's persistent definition before it
saves it; a guest found shut off with that mark and its managed-save image
is started again -- which restores it from the image -- and the mark is
removed.  Only marked guests: a guest someone else saved, or one that was
shut off, stays as it is (libvirt-guests' ``ON_BOOT=start`` would start
them all).  A marked guest whose image is gone (started and shut down
meanwhile, or the image removed) is not started; its mark is dropped.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, TypeVar

import trio

from supervisor import format_duration

from . import _domains as ops
from ._binding import LibvirtFailure
from ._connection import Hypervisor
from ._domains import Saved
from ._settings import LibvirtSettings

__all__ = ["restore_saved"]

T = TypeVar("T")


async def restore_saved(hv: Hypervisor, settings: LibvirtSettings, log: logging.Logger) -> list[str]:
    """Restore every selected guest this plugin saved, in parallel; the
    names of those running again."""
    saved, failure = await _attempt(hv, ops.saved_by_us(settings.selection))
    if failure is not None:  # an expected failure: one line, no traceback
        log.error("cannot list the guests to restore on %s: %s", hv.uri, failure)
    if not saved:
        return []
    log.info("restoring %d guest(s) this plugin saved: %s", len(saved), ", ".join(s.name for s in saved))
    restored: list[str] = []
    async with trio.open_nursery() as nursery:
        for guest in saved:
            nursery.start_soon(_restore_one, hv, settings, log, guest, restored)
    return restored


async def _restore_one(
    hv: Hypervisor, settings: LibvirtSettings, log: logging.Logger, guest: Saved, restored: list[str]
) -> None:
    if not guest.has_image:
        log.warning("%s: marked as saved by this plugin but its saved image is gone: not started", guest.name)
        await _unmark(hv, log, guest)
        return
    started = trio.current_time()
    _, failure = await _attempt(hv, ops.restore(guest.uuid, bypass_cache=settings.bypass_cache))
    if failure is not None:
        # The mark stays: the next start-up tries again.
        log.error("%s: restore failed: %s", guest.name, failure)
        return
    restored.append(guest.name)
    log.info("%s: restored in %s", guest.name, format_duration(trio.current_time() - started))
    await _unmark(hv, log, guest)
    if settings.sync_time:
        try:
            await hv.call(ops.sync_time(guest.uuid))
        except LibvirtFailure as exc:
            log.warning("%s: cannot set its clock after the restore (needs qemu-ga in the guest): %s", guest.name, exc)


async def _unmark(hv: Hypervisor, log: logging.Logger, guest: Saved) -> None:
    try:
        await hv.call(ops.unmark_saved(guest.uuid))
    except LibvirtFailure as exc:
        log.warning("%s: cannot remove its saved mark: %s", guest.name, exc)


async def _attempt(hv: Hypervisor, op: Callable[[Any], T]) -> tuple[T | None, LibvirtFailure | None]:
    """``hv.call(op)``: its result, or why it failed."""
    try:
        return await hv.call(op), None
    except LibvirtFailure as exc:
        return None, exc
