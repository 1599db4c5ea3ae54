"""The supervisor's exit statuses: one constant each, for both processes.

A container's exit status is what the kubelet, ``kubectl describe`` and a
CI job see of the whole run, so each value means one thing only.  Apart from
these, the supervisor exits with the main process's own status (or
128 + N when a signal N killed it), as tini does.
"""

from __future__ import annotations

import enum
import signal

__all__ = ["ExitCode"]


class ExitCode(enum.IntEnum):
    OK = 0
    USAGE = 2
    """A mistake in the command line or the configuration (one line on
    stderr says where and what); nothing was started."""
    PROCESS_FAILED = 70
    """A supervised process failed for good (crash loop, never ready, a
    failing health check with ``on_failure: shutdown``) and brought the
    container down; or the orchestrator itself died without an exit status
    of its own.  EX_SOFTWARE of sysexits.h: distinct from a usage error and
    from any 128 + N."""
    NOT_EXECUTABLE = 126
    """The command exists but cannot be executed (what a shell reports)."""
    NOT_FOUND = 127
    """The command was not found (what a shell reports)."""
    WALL = 128 + int(signal.SIGKILL)
    """The grace period ran out and PID 1 killed what was left: what the
    main process, killed with everything else, reports."""
