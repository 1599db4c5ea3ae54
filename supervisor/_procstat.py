"""One process's line of ``/proc/PID/stat``: its name, state and parent.

Both layers read it: the init layer to find (and name) the processes left
when it sweeps, the process runtime to see whether a process it is about to
stop is itself stopped.  Stdlib only, and nothing beyond what the init layer
already imports, as PID 1 uses it.
"""

from __future__ import annotations

__all__ = ["ProcStat", "read_stat"]


class ProcStat:
    # A class with slots, not a NamedTuple: ``typing`` would be most of
    # PID 1's start-up beyond the Python floor.
    __slots__ = ("comm", "pid", "ppid", "state")

    def __init__(self, pid: int, comm: str, state: str, ppid: int) -> None:
        self.pid = pid
        self.comm = comm
        """The command name the kernel keeps (at most 15 bytes, as ps shows it)."""
        self.state = state
        """One letter: R running, S sleeping, D in uninterruptible I/O, Z zombie,
        T stopped by a signal, t stopped by a tracer, ..."""
        self.ppid = ppid

    def __repr__(self) -> str:
        return f"ProcStat(pid={self.pid}, comm={self.comm!r}, state={self.state!r}, ppid={self.ppid})"

    @property
    def zombie(self) -> bool:
        return self.state == "Z"

    @property
    def stopped(self) -> bool:
        """Stopped (SIGSTOP, a debugger): it acts on no signal but SIGKILL
        and SIGCONT until it is continued."""
        return self.state in ("T", "t")


def read_stat(pid: int) -> ProcStat | None:
    """The process's stat line, or None when it is gone (or unreadable)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as file:
            raw = file.read()
    except OSError:
        return None
    # The name is in parentheses and may itself contain ")" or spaces; the
    # last ")" of the line is the one that closes it.
    head, _, rest = raw.rpartition(b")")
    fields = rest.split()
    if len(fields) < 2 or not fields[1].isdigit():
        return None
    comm = head[head.find(b"(") + 1 :].decode(errors="replace")
    return ProcStat(pid, comm, fields[0].decode(errors="replace"), int(fields[1]))
