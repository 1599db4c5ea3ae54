"""The destroy both the shutdown and the enforcer end with."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import trio

from . import _domains as ops
from ._binding import NO_DOMAIN, OPERATION_INVALID, LibvirtFailure
from ._connection import Hypervisor

__all__ = ["FINAL", "destroy", "notifying"]

# Errors that settle the matter: the domain is gone, or no longer running.
FINAL = frozenset({NO_DOMAIN, OPERATION_INVALID})


async def destroy(
    hv: Hypervisor, uuid: str, *, graceful_until: float, on_done: Callable[[], None] | None = None
) -> LibvirtFailure | None:
    """Destroy the domain: gracefully until ``graceful_until`` (QEMU gets
    SIGTERM and flushes its disks; libvirt gives up after about 15 s), then
    plainly (SIGKILL).

    Returns why the graceful destroy did not do it (None if it did).  Raises
    LibvirtFailure if the plain destroy fails too, or at once for NO_DOMAIN
    and OPERATION_INVALID (gone or not running: nothing to destroy).
    ``on_done`` runs in trio's thread once a destroy call has succeeded, also
    when the caller was cancelled meanwhile (the call's thread runs on).
    """
    graceful_error: LibvirtFailure | None = None
    with trio.move_on_at(graceful_until):
        try:
            await hv.call(notifying(hv, ops.destroy(uuid, graceful=True), on_done))
        except LibvirtFailure as exc:
            if exc.code in FINAL:
                raise
            graceful_error = exc
        else:
            return None
    if graceful_error is None:
        graceful_error = LibvirtFailure("graceful destroy did not finish in time")
    await hv.call(notifying(hv, ops.destroy(uuid, graceful=False), on_done))
    return graceful_error


def notifying(hv: Hypervisor, op: Callable[[Any], None], on_done: Callable[[], None] | None) -> Callable[[Any], None]:
    """``op``, followed by ``on_done()`` in trio's thread once it succeeded."""
    if on_done is None:
        return op

    def run(conn: Any) -> None:
        op(conn)
        hv.soon(on_done)

    return run
