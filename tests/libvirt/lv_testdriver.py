"""Domains on libvirt's test:///default driver, for the fast tests.

The test driver shuts a domain off at once on a plain shutdown request,
rejects the ACPI flag (the plugin falls back to the driver default), and with
``<on_poweroff>restart</on_poweroff>`` turns the request into a reboot: a
guest that ignores shutdown and only a destroy stops.
"""

from __future__ import annotations

from typing import Any

import libvirt

URI = "test:///default"
STATE_RUNNING = 1
STATE_SHUTOFF = 5
REASON_SHUTDOWN = 1
REASON_DESTROYED = 2
REASON_SAVED = 5


def domain_xml(name: str, *, stubborn: bool = False) -> str:
    on_poweroff = "restart" if stubborn else "destroy"
    return (
        f"<domain type='test'><name>{name}</name><memory>8192</memory>"
        f"<os><type>hvm</type></os><on_poweroff>{on_poweroff}</on_poweroff></domain>"
    )


def start(conn: Any, name: str, *, stubborn: bool = False, persistent: bool = True) -> Any:
    xml = domain_xml(name, stubborn=stubborn)
    if not persistent:
        return conn.createXML(xml, 0)
    dom = conn.defineXML(xml)
    dom.create()
    return dom


def state(conn: Any, name: str) -> tuple[int, int] | None:
    try:
        return tuple(conn.lookupByName(name).state())  # type: ignore[return-value]
    except libvirt.libvirtError as exc:
        if exc.get_error_code() == libvirt.VIR_ERR_NO_DOMAIN:
            return None
        raise
