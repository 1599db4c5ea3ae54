"""VM shutdown: 8 graceful QEMU guests, in parallel against one at a time."""

from __future__ import annotations

from .._bench import Bench
from .._results import Figure, Row, Target

__all__ = ["vm_shutdown"]


def vm_shutdown(bench: Bench) -> list[Row]:
    return [
        Row(
            "VM shutdown",
            "8 graceful QEMU guests, parallel",
            "s",
            Target("≤ 1.5 × one guest", None),
            Figure(note="not measured: not implemented yet"),
            {},
        )
    ]
