"""The libc calls the standard library does not wrap, through ctypes.

ctypes costs an orchestrator nothing (trio loads it), where python-prctl's
module would be another 0.1 MiB of every pod's memory for a parent-death
signal, and its tables do not name the capabilities newer than it.  Stdlib
only: the orchestrator sets its parent-death signal before trio is imported.
"""

from __future__ import annotations

import ctypes
import os

__all__ = ["PR_SET_PDEATHSIG", "malloc_trim", "prctl"]

# <linux/prctl.h>
PR_SET_PDEATHSIG = 1

_libc = ctypes.CDLL(None, use_errno=True)
_libc.prctl.argtypes = (ctypes.c_int, *[ctypes.c_ulong] * 4)
_libc.prctl.restype = ctypes.c_int


def prctl(option: int, arg2: int, arg3: int = 0) -> None:
    """prctl(2) with two arguments that matter; OSError when it fails."""
    if _libc.prctl(option, arg2, arg3, 0, 0) == -1:
        error = ctypes.get_errno()
        raise OSError(error, os.strerror(error))


def malloc_trim() -> None:
    """Hand the pages free inside the heap back to the kernel; nothing on a
    libc without malloc_trim (musl), which keeps them."""
    trim = getattr(_libc, "malloc_trim", None)
    if trim is not None:
        trim(0)
