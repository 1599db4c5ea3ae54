"""Every configured process's output through a pipe: passed on unchanged,
and seen line by line by the observers (``supervisor logs`` keeps the
recent ones).

Which processes: every process of the YAML file (the main one too), and
any process with ``log_prefix``.  Not the command given after ``--``: it
keeps the supervisor's own stdout and stderr, exactly as under tini or
dumb-init, for three reasons.  A pipe has a reader only while the
orchestrator lives, so a daemon the command leaves behind would die of
SIGPIPE on its first line during the final sweep (its cleanup lost); an
interactive ``supervisor -- bash`` needs the terminal itself (line editing,
``isatty``); and a drop-in init should not put a hop between a chatty app
and its log collector.  Nor a main process whose stdout is a terminal,
for the second reason.  Such output is not in ``supervisor logs``, which
says so (and ``kubectl logs`` has it).

Without ``log_prefix`` the bytes go out as they came, chunk by chunk, so a
prompt or a progress bar without a newline is not held back.  A
descendant that outlives its run and keeps the descriptors has the same
problem as above once the run's pipe is closed; it should log elsewhere.
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
    if spec.log_prefix:
        return True
    if spec.inherit_output:
        return False
    if not spec.main:
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
