"""The shutdown request a domain carries in its libvirt metadata.

A provider (or ``supervisor libvirt request-shutdown``) marks a domain whose
deletion began with one element in this plugin's namespace::

    <metadata>
      <supervisor:shutdown xmlns:supervisor="urn:pid1-supervisor:libvirt:1"
                           requested-at="2026-12-01T14:00:00Z" grace="5m"/>
    </metadata>

``requested-at`` (RFC 3339) is when the shutdown was first asked for; the
deletion-deadline enforcer re-sends the graceful request until
``requested-at + grace`` and then destroys the domain.  ``grace`` (a
duration; the plugin's ``enforcer.grace`` when absent) and ``guest-agent``
(``yes``: shut down through the QEMU guest agent, ACPI as fallback) are
optional.  Writing the element to the live definition only makes it vanish
when the guest stops, so a later start is not destroyed for an old request.
"""

from __future__ import annotations

import datetime as dt
import xml.etree.ElementTree as ET
from dataclasses import dataclass

from supervisor import format_duration, parse_duration

__all__ = ["KEY", "NAMESPACE", "SAVED_ELEMENT", "SAVED_KEY", "SAVED_NAMESPACE", "ShutdownRequest"]

NAMESPACE = "urn:pid1-supervisor:libvirt:1"
KEY = "supervisor"
ELEMENT = "shutdown"
# The mark of a guest this plugin saved (``mode: managedsave``), in its
# persistent definition: the guests to restore at the next start-up, and
# only those.  A namespace of its own, because libvirt keeps one element
# per namespace and the shutdown request has the other.
SAVED_NAMESPACE = "urn:pid1-supervisor:libvirt:saved:1"
SAVED_KEY = "supervisor-saved"
SAVED_ELEMENT = "<saved/>"


@dataclass(frozen=True, slots=True)
class ShutdownRequest:
    """What a domain's metadata asks for; every field is optional."""

    requested_at: float | None = None  # Unix time
    grace: float | None = None
    guest_agent: bool = False

    @classmethod
    def parse(cls, xml: str) -> ShutdownRequest:
        """From the element libvirt returns; ValueError names a bad attribute."""
        try:
            element = ET.fromstring(xml)
        except ET.ParseError as exc:
            raise ValueError(f"invalid metadata XML: {exc}") from None
        requested_at = None
        text = element.get("requested-at")
        if text:
            requested_at = parse_time(text)
        grace = None
        text = element.get("grace")
        if text:
            try:
                grace = parse_duration(text)
            except ValueError as exc:
                raise ValueError(f"grace: {exc}") from None
        agent = (element.get("guest-agent") or "no").strip().lower()
        if agent not in ("yes", "no", "true", "false", "1", "0"):
            raise ValueError(f"guest-agent: expected yes or no, got {agent!r}")
        return cls(requested_at, grace, agent in ("yes", "true", "1"))

    def to_xml(self) -> str:
        """The element to pass to ``virDomainSetMetadata`` (namespace added by libvirt)."""
        element = ET.Element(ELEMENT)
        if self.requested_at is not None:
            element.set("requested-at", format_time(self.requested_at))
        if self.grace is not None:
            element.set("grace", format_duration(self.grace))
        if self.guest_agent:
            element.set("guest-agent", "yes")
        return ET.tostring(element, encoding="unicode")

    def due(self, default_grace: float) -> float | None:
        """Unix time at which the domain must be gone; None without a request."""
        if self.requested_at is None:
            return None
        return self.requested_at + (self.grace if self.grace is not None else default_grace)


def parse_time(text: str) -> float:
    try:
        moment = dt.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"requested-at: invalid time {text!r}: use RFC 3339, e.g. 2026-12-01T14:00:00Z") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    return moment.timestamp()


def format_time(unix: float) -> str:
    moment = dt.datetime.fromtimestamp(unix, tz=dt.UTC)
    return moment.isoformat(timespec="seconds" if unix == int(unix) else "milliseconds").replace("+00:00", "Z")
