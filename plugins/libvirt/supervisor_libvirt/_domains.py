"""Domain operations, each a blocking function of a connection.

They run in worker threads through ``Hypervisor.call`` (or directly, in the
CLI).  Domains are looked up by UUID on every call: after a reconnect the old
domain objects belong to a dead connection, and a lookup costs one local RPC.
"""

from __future__ import annotations

import fnmatch
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from ._binding import (
    AGENT_FAILED,
    DESTROY_GRACEFUL,
    FLAGS_REJECTED,
    NO_DOMAIN,
    SHUTDOWN_ACPI_POWER_BTN,
    SHUTDOWN_DEFAULT,
    SHUTDOWN_GUEST_AGENT,
    STATE_NAMES,
    LibvirtFailure,
    failure,
    libvirt_module,
)
from ._metadata import KEY, NAMESPACE, ShutdownRequest

__all__ = ["Domain", "Selection", "list_domains"]

_LIST_ACTIVE = 1  # VIR_CONNECT_LIST_DOMAINS_ACTIVE
_METADATA_ELEMENT = 2  # VIR_DOMAIN_METADATA_ELEMENT
_AFFECT_CURRENT = 0
_AFFECT_LIVE = 1
_STATE_SHUTOFF = 5


@dataclass(frozen=True, slots=True)
class Domain:
    """A domain as listed: identity plus what its metadata asks for."""

    name: str
    uuid: str
    persistent: bool
    request: ShutdownRequest
    request_error: str | None = None


@dataclass(frozen=True, slots=True)
class Selection:
    """Which running domains the shutdown handles.

    ``names``: fnmatch patterns (empty: every domain); ``exclude``: patterns
    to leave alone; ``marker``: only domains with a metadata element in that
    XML namespace (e.g. the provider's own).
    """

    names: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    marker: str | None = None

    def matches_name(self, name: str) -> bool:
        if self.names and not any(fnmatch.fnmatchcase(name, p) for p in self.names):
            return False
        return not any(fnmatch.fnmatchcase(name, p) for p in self.exclude)


def list_domains(selection: Selection | None = None) -> Callable[[Any], list[Domain]]:
    """Running domains (matching ``selection``), with their shutdown requests."""

    def op(conn: Any) -> list[Domain]:
        libvirt = libvirt_module()
        found = []
        for dom in conn.listAllDomains(_LIST_ACTIVE):
            try:
                name = dom.name()
                if selection is not None:
                    if not selection.matches_name(name):
                        continue
                    if selection.marker and _metadata(libvirt, dom, selection.marker) is None:
                        continue
                request, error = ShutdownRequest(), None
                xml = _metadata(libvirt, dom, NAMESPACE)
                if xml is not None:
                    try:
                        request = ShutdownRequest.parse(xml)
                    except ValueError as exc:
                        error = str(exc)
                found.append(Domain(name, dom.UUIDString(), bool(dom.isPersistent()), request, error))
            except libvirt.libvirtError as exc:
                if exc.get_error_code() != NO_DOMAIN:  # vanished while listing: nothing to do
                    raise
        return found

    return op


def _metadata(libvirt: Any, dom: Any, namespace: str) -> str | None:
    try:
        return str(dom.metadata(_METADATA_ELEMENT, namespace, _AFFECT_CURRENT))
    except libvirt.libvirtError as exc:
        if exc.get_error_code() == libvirt.VIR_ERR_NO_DOMAIN_METADATA:
            return None
        raise


def lookup(conn: Any, uuid: str) -> Any:
    return conn.lookupByUUIDString(uuid)


def state(uuid: str) -> Callable[[Any], tuple[int, int]]:
    """``(state, reason)``; LibvirtFailure NO_DOMAIN when it is gone."""

    def op(conn: Any) -> tuple[int, int]:
        current, reason = lookup(conn, uuid).state()
        return int(current), int(reason)

    return op


def is_off(state_reason: tuple[int, int]) -> bool:
    return state_reason[0] == _STATE_SHUTOFF


def describe_state(state_reason: tuple[int, int]) -> str:
    return STATE_NAMES.get(state_reason[0], f"state {state_reason[0]}")


@dataclass(frozen=True, slots=True)
class Accepted:
    """Which shutdown flags the driver took, and why others were refused."""

    flags: int
    refused: tuple[tuple[int, LibvirtFailure], ...] = ()  # (flags, why), in order


def request_shutdown(uuid: str, flags: int) -> Callable[[Any], Accepted]:
    """Ask the guest to shut down, falling back as the driver requires:
    flags it rejects (the test driver and ACPI) to its default, a failed guest
    agent to ACPI alone.  Other errors (gone, not running...) propagate."""

    def op(conn: Any) -> Accepted:
        libvirt = libvirt_module()
        dom = lookup(conn, uuid)
        current = flags
        refused: list[tuple[int, LibvirtFailure]] = []
        while True:
            try:
                dom.shutdownFlags(current)
            except libvirt.libvirtError as exc:
                problem = failure(exc)
                fallback = fallback_flags(current, problem.code)
                if fallback is None:
                    raise
                refused.append((current, problem))
                current = fallback
                continue
            return Accepted(current, tuple(refused))

    return op


def fallback_flags(flags: int, code: int) -> int | None:
    """The flags to retry with after error ``code``; None: retrying won't help."""
    if code in AGENT_FAILED and flags & SHUTDOWN_GUEST_AGENT:
        return flags & ~SHUTDOWN_GUEST_AGENT or SHUTDOWN_ACPI_POWER_BTN
    if code in FLAGS_REJECTED and flags != SHUTDOWN_DEFAULT:
        return SHUTDOWN_DEFAULT
    return None


def shutdown_flags(*, agent: bool) -> int:
    """ACPI power button, through the guest agent first if opted in."""
    return SHUTDOWN_ACPI_POWER_BTN | (SHUTDOWN_GUEST_AGENT if agent else 0)


def describe_flags(flags: int) -> str:
    if flags == SHUTDOWN_DEFAULT:
        return "driver default"
    names = []
    if flags & SHUTDOWN_GUEST_AGENT:
        names.append("guest agent")
    if flags & SHUTDOWN_ACPI_POWER_BTN:
        names.append("ACPI power button")
    return " or ".join(names)


def destroy(uuid: str, *, graceful: bool) -> Callable[[Any], None]:
    def op(conn: Any) -> None:
        lookup(conn, uuid).destroyFlags(DESTROY_GRACEFUL if graceful else 0)

    return op


def managed_save(uuid: str) -> Callable[[Any], None]:
    def op(conn: Any) -> None:
        lookup(conn, uuid).managedSave(0)

    return op


def uuid_of(name: str) -> Callable[[Any], str]:
    return lambda conn: str(conn.lookupByName(name).UUIDString())


def set_request(name: str, request: ShutdownRequest | None) -> Callable[[Any], None]:
    """Write (or, with None, remove) the request in the live definition."""

    def op(conn: Any) -> None:
        dom = conn.lookupByName(name)
        xml = None if request is None else request.to_xml()
        flags = _AFFECT_LIVE if dom.isActive() else _AFFECT_CURRENT
        dom.setMetadata(_METADATA_ELEMENT, xml, None if xml is None else KEY, NAMESPACE, flags)

    return op


def get_request(name: str) -> Callable[[Any], tuple[str, ShutdownRequest | None]]:
    """``(uuid, request)`` of the named domain; ValueError for bad metadata."""

    def op(conn: Any) -> tuple[str, ShutdownRequest | None]:
        libvirt = libvirt_module()
        dom = conn.lookupByName(name)
        xml = _metadata(libvirt, dom, NAMESPACE)
        return dom.UUIDString(), None if xml is None else ShutdownRequest.parse(xml)

    return op


def log_failure(log: logging.Logger, what: str, exc: LibvirtFailure) -> None:
    """One line per libvirt error, with its code."""
    log.warning("%s: %s", what, exc)


def names(domains: Iterable[Domain]) -> str:
    return ", ".join(d.name for d in domains) or "none"
