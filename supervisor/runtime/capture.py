"""Every child's output through a pipe: passed on unchanged, and seen line
by line by the observers (``supervisor logs`` keeps the recent ones).

Which processes: all of them, but for a main process whose stdout is a
terminal — an interactive ``supervisor -- bash`` keeps its terminal (line
editing, colours, ``isatty``), and its lines are not in ``supervisor logs``.
That includes the main process of a plain ``supervisor -- COMMAND``, which
is started before trio is imported: its pipes are made then, and the
kernel's pipe buffer (64 KiB) holds what it writes until the orchestrator's
pump starts, some 100 ms later.

Without ``log_prefix`` the bytes go out as they came, chunk by chunk, so a
prompt or a progress bar without a newline is not held back.  The cost of
reading through the supervisor: a descendant that outlives the run it
belongs to (a daemon that kept the descriptors) loses its output once the
run has ended and the pipe is closed; it should log elsewhere.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from ..config import ProcessSpec

if TYPE_CHECKING:
    import trio

    from .output import LineObserver, OutputWriter

__all__ = ["captured", "pump_through"]

# A "line" that never ends is shown to the observers in pieces this long.
_PIECE = 8192


def captured(spec: ProcessSpec) -> bool:
    """Whether ``spec``'s stdout and stderr are pipes the supervisor reads."""
    if spec.log_prefix or not spec.main:
        return True
    try:
        return not os.isatty(1)
    except OSError:
        return True


async def pump_through(
    source: trio.abc.ReceiveStream,
    writer: OutputWriter,
    *,
    process_name: str,
    stream: str,
    on_line: LineObserver,
) -> None:
    """Copy ``source`` into ``writer`` as it comes; show ``on_line`` each line."""
    pending = b""
    async for data in source:
        chunk = bytes(data)
        writer.write(chunk)
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for line in lines:
            on_line(process_name, stream, line)
        while len(pending) > _PIECE:
            on_line(process_name, stream, pending[:_PIECE])
            pending = pending[_PIECE:]
    if pending:
        on_line(process_name, stream, pending)
