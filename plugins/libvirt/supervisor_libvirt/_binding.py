"""The thin layer over libvirt-python: lazy import, error codes, stderr silence.

libvirt is imported only when the plugin is enabled (or its subcommand runs),
so an installed but unused plugin costs nothing and works without libvirt0.
Every error leaves this module as ``LibvirtFailure`` carrying libvirt's code,
so the callers compare numbers instead of parsing messages.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = [
    "ARGUMENT_UNSUPPORTED",
    "INVALID_ARG",
    "NO_DOMAIN",
    "NO_SUPPORT",
    "OPERATION_INVALID",
    "LibvirtFailure",
    "guarded",
    "libvirt_module",
]

T = TypeVar("T")

# virErrorNumber values (libvirt's include/libvirt/virterror.h); kept here so
# that comparisons do not need the module loaded.
INTERNAL_ERROR = 1
NO_SUPPORT = 3
INVALID_ARG = 8
SYSTEM_ERROR = 38
NO_DOMAIN = 42
OPERATION_INVALID = 55
OPERATION_TIMEOUT = 68
ARGUMENT_UNSUPPORTED = 74
OPERATION_UNSUPPORTED = 84
AGENT_UNRESPONSIVE = 86
AGENT_COMMAND_TIMEOUT = 112

# The driver cannot do what the flags ask (test driver and ACPI, LXC and
# agent...): retry with the plain request.
FLAGS_REJECTED = frozenset({NO_SUPPORT, INVALID_ARG, ARGUMENT_UNSUPPORTED, OPERATION_UNSUPPORTED})
AGENT_FAILED = frozenset({AGENT_UNRESPONSIVE, AGENT_COMMAND_TIMEOUT, OPERATION_TIMEOUT})

# virDomainShutdownFlagValues, virDomainDestroyFlagsValues, virDomainState.
SHUTDOWN_DEFAULT = 0
SHUTDOWN_ACPI_POWER_BTN = 1
SHUTDOWN_GUEST_AGENT = 2
DESTROY_GRACEFUL = 1
STATE_NAMES = {
    0: "no state",
    1: "running",
    2: "blocked",
    3: "paused",
    4: "shutting down",
    5: "shut off",
    6: "crashed",
    7: "suspended by guest",
}

_lock = threading.Lock()
_module: Any = None


class LibvirtFailure(Exception):
    """A libvirt call failed; ``code`` is its virErrorNumber.

    ``connection_lost`` says the connection itself is gone (libvirtd stopped
    or restarted), as opposed to an error about one domain.
    """

    def __init__(self, message: str, code: int = 0, domain: int = 0, *, connection_lost: bool = False) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.domain = domain
        self.connection_lost = connection_lost

    def __str__(self) -> str:
        return f"{self.message} (libvirt error {self.code})" if self.code else self.message


def libvirt_module() -> Any:
    """Import libvirt once, with its stderr error printer silenced.

    libvirt prints every error to stderr by default, including the expected
    ones (a domain that vanished); they arrive here as exceptions instead and
    are logged once, with their codes.
    """
    global _module
    with _lock:
        if _module is None:
            try:
                import libvirt  # type: ignore[import-untyped,import-not-found,unused-ignore]
            except ImportError as exc:
                raise LibvirtFailure(f"libvirt-python is not importable: {exc}") from exc
            libvirt.registerErrorHandler(_ignore_error, None)
            _module = libvirt
        return _module


def _ignore_error(_context: object, _error: object) -> None:
    return None


def guarded(function: Callable[[], T]) -> T:
    """Run ``function`` and turn a libvirtError into a LibvirtFailure."""
    libvirt = libvirt_module()
    try:
        return function()
    except libvirt.libvirtError as exc:
        raise failure(exc) from None


def failure(exc: Any, *, connection_lost: bool = False) -> LibvirtFailure:
    return LibvirtFailure(
        str(exc.get_error_message() or exc),
        int(exc.get_error_code() or 0),
        int(exc.get_error_domain() or 0),
        connection_lost=connection_lost,
    )
