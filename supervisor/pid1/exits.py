"""The supervisor's exit statuses: one constant each, for both processes.

A container's exit status is what the kubelet, ``kubectl describe`` and a
CI job see of the whole run, so each value means one thing only.  Apart from
these, the supervisor exits with the main process's own status (or
128 + N when a signal N killed it), as tini does.
"""

from __future__ import annotations

import signal

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Final

__all__ = ["ExitCode"]


class ExitCode:
    """The values, as plain ints: an ``IntEnum`` would add nothing a caller
    uses (they are returned, compared and printed as numbers) and cost PID 1
    a fifth of a millisecond of start-up to build."""

    OK: Final = 0
    USAGE: Final = 2
    """A mistake in the command line or the configuration (one line on
    stderr says where and what); nothing was started."""
    PROCESS_FAILED: Final = 70
    """A supervised process failed for good (crash loop, never ready, a
    failing health check with ``on_failure: shutdown``) and brought the
    container down; or the orchestrator itself died without an exit status
    of its own.  EX_SOFTWARE of sysexits.h: distinct from a usage error and
    from any 128 + N."""
    NOT_EXECUTABLE: Final = 126
    """The command exists but cannot be executed (what a shell reports)."""
    NOT_FOUND: Final = 127
    """The command was not found (what a shell reports)."""
    WALL: Final = 128 + int(signal.SIGKILL)
    """The grace period ran out and PID 1 killed what was left: what the
    main process, killed with everything else, reports."""
