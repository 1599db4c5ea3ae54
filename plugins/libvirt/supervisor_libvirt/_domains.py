"""Domain operations, each a blocking function of a connection.

They run in worker threads through ``Hypervisor.call`` (or directly, in the
CLI).  Domains are looked up by UUID on every call: after a reconnect the old
domain objects belong to a dead connection, and a lookup costs one local RPC.
"""

from __future__ import annotations

import contextlib
import fnmatch
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from ._binding import (
    AGENT_FAILED,
    DESTROY_GRACEFUL,
    FLAGS_REJECTED,
    NO_DOMAIN,
    OPERATION_INVALID,
    SHUTDOWN_ACPI_POWER_BTN,
    SHUTDOWN_DEFAULT,
    SHUTDOWN_GUEST_AGENT,
    STATE_NAMES,
    LibvirtFailure,
    failure,
    libvirt_module,
)
from ._metadata import KEY, NAMESPACE, SAVED_ELEMENT, SAVED_KEY, SAVED_NAMESPACE, ShutdownRequest

__all__ = ["Domain", "Key", "RequestView", "Selection", "list_domains"]

_LIST_ACTIVE = 1  # VIR_CONNECT_LIST_DOMAINS_ACTIVE
_LIST_INACTIVE = 2
_LIST_PERSISTENT = 4
_SAVE_BYPASS_CACHE = 1  # VIR_DOMAIN_SAVE_BYPASS_CACHE
_START_BYPASS_CACHE = 4  # VIR_DOMAIN_START_BYPASS_CACHE
_TIME_SYNC = 1  # VIR_DOMAIN_TIME_SYNC
_METADATA_ELEMENT = 2  # VIR_DOMAIN_METADATA_ELEMENT
_AFFECT_CURRENT = 0
_AFFECT_LIVE = 1
_AFFECT_CONFIG = 2
_STATE_SHUTOFF = 5

# virDomainShutoffReason values.
SHUTOFF_UNKNOWN = 0
SHUTOFF_SHUTDOWN = 1
SHUTOFF_DESTROYED = 2
SHUTOFF_CRASHED = 3
SHUTOFF_MIGRATED = 4
SHUTOFF_SAVED = 5
SHUTOFF_FAILED = 6
SHUTOFF_DAEMON = 8  # killed by libvirtd itself while it reconnected to the domain

Key = tuple[str, int]
"""One boot of a domain: its UUID and its ID, which libvirt assigns anew at
every start (the same guest started again is another key)."""


@dataclass(frozen=True, slots=True)
class Domain:
    """A running domain as listed: identity plus what its metadata asks for.

    ``request`` is the live definition's request, whether or not the
    persistent definition carries the same (a provider writing with ``--live
    --config``, or a start copying the definition's).  ``definition_only``:
    the persistent definition carries a request and the live one does not
    (written with ``--config`` alone): it asks nothing of this boot, so it
    is reported, never acted on.  ``selected``: whether the plugin's
    selection (domains, exclude, marker) takes the domain.
    """

    name: str
    uuid: str
    persistent: bool
    request: ShutdownRequest
    request_error: str | None = None
    id: int = 0
    selected: bool = True
    definition_only: bool = False

    @property
    def key(self) -> Key:
        return (self.uuid, self.id)


@dataclass(frozen=True, slots=True)
class Selection:
    """Which running domains the plugin handles, at shutdown and in the enforcer.

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

    def describe(self) -> str:
        parts = [f"domains {', '.join(self.names)}"] if self.names else []
        if self.exclude:
            parts.append(f"exclude {', '.join(self.exclude)}")
        if self.marker:
            parts.append(f"marker {self.marker}")
        return "; ".join(parts) or "every domain"


def list_domains(selection: Selection | None = None, *, unselected: bool = False) -> Callable[[Any], list[Domain]]:
    """Running domains matching ``selection``, with their shutdown requests;
    with ``unselected`` the others too, marked ``selected=False``."""

    def op(conn: Any) -> list[Domain]:
        libvirt = libvirt_module()
        found = []
        for dom in conn.listAllDomains(_LIST_ACTIVE):
            try:
                name = dom.name()
                selected = selection is None or (
                    selection.matches_name(name)
                    and not (selection.marker and _metadata(libvirt, dom, selection.marker) is None)
                )
                if selected or unselected:
                    found.append(_describe(libvirt, dom, name, selected=selected))
            except libvirt.libvirtError as exc:
                # Vanished (transient) or stopped (persistent: its live
                # definition is gone) while listing: nothing to do.
                if exc.get_error_code() not in (NO_DOMAIN, OPERATION_INVALID):
                    raise
        return found

    return op


def _describe(libvirt: Any, dom: Any, name: str, *, selected: bool) -> Domain:
    persistent = bool(dom.isPersistent())
    request, error = ShutdownRequest(), None
    xml = _metadata(libvirt, dom, NAMESPACE, _AFFECT_LIVE)
    if xml is not None:
        try:
            request = ShutdownRequest.parse(xml)
        except ValueError as exc:
            error = str(exc)
    definition_only = xml is None and persistent and _metadata(libvirt, dom, NAMESPACE, _AFFECT_CONFIG) is not None
    return Domain(
        name,
        dom.UUIDString(),
        persistent,
        request,
        error,
        id=int(dom.ID()),
        selected=selected,
        definition_only=definition_only,
    )


def _metadata(libvirt: Any, dom: Any, namespace: str, flags: int = _AFFECT_CURRENT) -> str | None:
    try:
        return str(dom.metadata(_METADATA_ELEMENT, namespace, flags))
    except libvirt.libvirtError as exc:
        if exc.get_error_code() == libvirt.VIR_ERR_NO_DOMAIN_METADATA:
            return None
        raise


def requests_in_definitions() -> Callable[[Any], list[tuple[str, str]]]:
    """``(name, element)`` of shut-off persistent domains whose definition
    carries a request (every start would copy it into the live one)."""

    def op(conn: Any) -> list[tuple[str, str]]:
        libvirt = libvirt_module()
        found = []
        for dom in conn.listAllDomains(_LIST_INACTIVE):
            try:
                xml = _metadata(libvirt, dom, NAMESPACE, _AFFECT_CONFIG)
                if xml is not None:
                    found.append((dom.name(), xml))
            except libvirt.libvirtError as exc:
                if exc.get_error_code() != NO_DOMAIN:
                    raise
        return found

    return op


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


def managed_save(uuid: str, *, bypass_cache: bool = False) -> Callable[[Any], None]:
    """Save the guest's memory, first marking its persistent definition as
    saved by this plugin (what ``restore`` at the next start-up looks for);
    the mark is taken back if the save fails."""

    def op(conn: Any) -> None:
        libvirt = libvirt_module()
        dom = lookup(conn, uuid)
        dom.setMetadata(_METADATA_ELEMENT, SAVED_ELEMENT, SAVED_KEY, SAVED_NAMESPACE, _AFFECT_CONFIG)
        try:
            dom.managedSave(_SAVE_BYPASS_CACHE if bypass_cache else 0)
        except libvirt.libvirtError:
            with contextlib.suppress(libvirt.libvirtError):
                dom.setMetadata(_METADATA_ELEMENT, None, None, SAVED_NAMESPACE, _AFFECT_CONFIG)
            raise

    return op


@dataclass(frozen=True, slots=True)
class Saved:
    """A shut-off guest whose definition carries this plugin's saved mark."""

    name: str
    uuid: str
    has_image: bool  # its managed-save image is still there


def saved_by_us(selection: Selection) -> Callable[[Any], list[Saved]]:
    """The selected shut-off persistent domains this plugin saved."""

    def op(conn: Any) -> list[Saved]:
        libvirt = libvirt_module()
        found = []
        for dom in conn.listAllDomains(_LIST_INACTIVE | _LIST_PERSISTENT):
            try:
                name = dom.name()
                if not selection.matches_name(name):
                    continue
                if _metadata(libvirt, dom, SAVED_NAMESPACE, _AFFECT_CONFIG) is None:
                    continue
                if selection.marker and _metadata(libvirt, dom, selection.marker, _AFFECT_CONFIG) is None:
                    continue
                found.append(Saved(name, dom.UUIDString(), bool(dom.hasManagedSaveImage(0))))
            except libvirt.libvirtError as exc:
                if exc.get_error_code() != NO_DOMAIN:
                    raise
        return found

    return op


def restore(uuid: str, *, bypass_cache: bool = False) -> Callable[[Any], None]:
    """Start the guest, from its managed-save image (libvirt takes the image
    when there is one)."""

    def op(conn: Any) -> None:
        lookup(conn, uuid).createWithFlags(_START_BYPASS_CACHE if bypass_cache else 0)

    return op


def unmark_saved(uuid: str) -> Callable[[Any], None]:
    def op(conn: Any) -> None:
        lookup(conn, uuid).setMetadata(_METADATA_ELEMENT, None, None, SAVED_NAMESPACE, _AFFECT_CONFIG)

    return op


def sync_time(uuid: str) -> Callable[[Any], None]:
    """Set the guest's clock from the host's (through the guest agent): a
    restored guest's clock stands where it was when it was saved."""

    def op(conn: Any) -> None:
        # With VIR_DOMAIN_TIME_SYNC libvirt ignores the time given.
        lookup(conn, uuid).setTime({"seconds": 0, "nseconds": 0}, _TIME_SYNC)

    return op


@dataclass(frozen=True, slots=True)
class RequestView:
    """A domain's request as the operators' commands see it."""

    uuid: str
    active: bool
    request: ShutdownRequest | None  # the live one; None: none
    in_definition: bool  # its persistent definition carries a request


def set_request(name: str, request: ShutdownRequest) -> Callable[[Any], None]:
    """Write the request into the live definition of a running domain, so
    that it vanishes when the guest stops; OPERATION_INVALID if it is not
    running (a request there would land in the persistent definition, and
    every later start would carry it)."""

    def op(conn: Any) -> None:
        dom = conn.lookupByName(name)
        dom.setMetadata(_METADATA_ELEMENT, request.to_xml(), KEY, NAMESPACE, _AFFECT_LIVE)

    return op


def remove_request(name: str) -> Callable[[Any], bool]:
    """Remove the request from the live definition and from the persistent
    one (where only a mistake puts it); whether there was one."""

    def op(conn: Any) -> bool:
        libvirt = libvirt_module()
        dom = conn.lookupByName(name)
        places = [_AFFECT_LIVE] if dom.isActive() else []
        if dom.isPersistent():
            places.append(_AFFECT_CONFIG)
        removed = False
        for flags in places:
            if _metadata(libvirt, dom, NAMESPACE, flags) is not None:
                dom.setMetadata(_METADATA_ELEMENT, None, None, NAMESPACE, flags)
                removed = True
        return removed

    return op


def get_request(name: str) -> Callable[[Any], RequestView]:
    """The named domain's request (None for unreadable live metadata)."""

    def op(conn: Any) -> RequestView:
        libvirt = libvirt_module()
        dom = conn.lookupByName(name)
        active = bool(dom.isActive())
        live = _metadata(libvirt, dom, NAMESPACE, _AFFECT_LIVE) if active else None
        config = _metadata(libvirt, dom, NAMESPACE, _AFFECT_CONFIG) if dom.isPersistent() else None
        request = None
        if live is not None:
            with contextlib.suppress(ValueError):  # unreadable: to be replaced
                request = ShutdownRequest.parse(live)
        return RequestView(dom.UUIDString(), active, request, config is not None)

    return op


def names(domains: Iterable[Domain]) -> str:
    return ", ".join(d.name for d in domains) or "none"
