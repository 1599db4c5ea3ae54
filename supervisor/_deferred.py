"""Modules imported on first use instead of at ``import`` time.

trio imports ``ssl`` (with OpenSSL's ``libcrypto``), ``hmac`` (with
``hashlib``) and ``idna`` when it is imported, for TLS streams, DTLS cookies
and host names it encodes: about 2 MiB of every orchestrator's memory, in a
pod where none of them is used unless an HTTPS probe or a plugin asks for
TLS.  ``defer`` puts a stand-in for each in ``sys.modules``; ``import ssl``
binds the stand-in, and the first attribute anyone reads from it imports the
real module, which then replaces the stand-in everywhere it can: in
``sys.modules``, and in the stand-in's own namespace for the modules that
bound it early.

``importlib.util.LazyLoader`` cannot do this on Python 3.11: importing a
module that is already in ``sys.modules`` reads its ``__spec__``, which
makes a lazy module load at the next ``import`` of it anywhere.
"""

from __future__ import annotations

import importlib
import os
import sys
import threading
import types
from typing import Any

__all__ = ["DeferredModule", "defer", "defer_trio_extras"]

_loading = threading.Lock()


class DeferredModule(types.ModuleType):
    """Stands in for a module until one of its attributes is read."""

    def __getattr__(self, attribute: str) -> Any:
        # Called only for names the namespace does not hold: before the load,
        # every name but the module type's own; after it, names the real
        # module lacks too (AttributeError, as from the real module).
        with _loading:
            real = self.__dict__.get("_deferred_real")
            if real is None:
                real = self._load()
        return getattr(real, attribute)

    def _load(self) -> types.ModuleType:
        name = self.__name__
        if sys.modules.get(name) is self:
            del sys.modules[name]
        try:
            real = importlib.import_module(name)
        except BaseException:
            sys.modules.setdefault(name, self)
            raise
        # Later reads through the stand-in find the real names directly.
        self.__dict__.update(real.__dict__)
        self.__dict__["_deferred_real"] = real
        return real


def defer(*names: str) -> None:
    """Import each of ``names`` on first use; a module already imported
    (or already deferred) is left as it is."""
    for name in names:
        if name not in sys.modules:
            sys.modules[name] = DeferredModule(name)


def defer_trio_extras() -> None:
    """Defer what trio imports but a supervisor without HTTPS never uses.

    TLS, DTLS cookies and international host names (``ssl``, ``hmac``,
    ``idna``); the compression modules and ``tempfile`` that ``shutil`` and
    ``ctypes.util`` bring (trio imports ``ctypes.util`` to name its threads,
    and the lookup is answered without them); and ``unicodedata``, which
    attrs reads only for a class attribute with a non-ASCII name.  Called
    before anything imports trio: a module trio has already bound is too late.
    """
    defer("ssl", "hmac", "idna", "bz2", "lzma", "zlib", "unicodedata", "shutil", "tempfile")
    _answer_pthread_lookup()


def _answer_pthread_lookup() -> None:
    """Answer trio's ``ctypes.util.find_library("pthread")`` without ldconfig.

    trio asks it once, at import, to name its worker threads.  On Linux,
    ``find_library`` runs ``/sbin/ldconfig -p`` and parses its output (and
    without it tries a C compiler, then ``ld``): a process spawned by every
    orchestrator at start, some milliseconds of CPU, and an exec that
    runtime security tools report as unexpected in a pod.  On glibc the
    answer is always the soname ``libpthread.so.0``; since glibc 2.34 that
    is a stub whose symbols ``dlsym`` finds in libc, where they moved.
    Other names, and other C libraries (musl), are asked as before.
    """
    import ctypes.util

    asked = ctypes.util.find_library
    try:
        glibc = bool(os.confstr("CS_GNU_LIBC_VERSION"))
    except (ValueError, OSError):  # a C library without the name
        glibc = False
    if not glibc or getattr(asked, "__module__", None) == __name__:
        return

    def find_library(name: str) -> str | None:
        return "libpthread.so.0" if name == "pthread" else asked(name)

    ctypes.util.find_library = find_library
