"""Domain XML for the tiny test guest, and a helper that starts and tracks guests."""

from __future__ import annotations

import contextlib
import time
import uuid as uuidlib
from pathlib import Path
from typing import Any
from xml.sax.saxutils import escape

import libvirt

from tests.libvirt.lv_guestimage import READY_MARK, GuestImage

FLAVOURS = {
    "graceful": ("honour", 0),  # powers off at the press
    "slow": ("honour", 3),  # powers off 3 s after the press
    "stubborn": ("ignore", 0),  # ignores the power button
}


def guest_xml(
    name: str, image: GuestImage, console: Path, mode: str, delay: float, *, on_reboot: str = "destroy"
) -> str:
    # no_timer_check: under TCG on a loaded machine the kernel's boot-time
    # check that the IO-APIC timer ticks can miss its window and panic
    # ("IO-APIC + timer doesn't work!", seen in setup_IO_APIC); the timer
    # works, only the emulation is slow.
    cmdline = f"console=ttyS0 quiet panic=-1 no_timer_check guest.mode={mode} guest.delay={delay:g}"
    return f"""<domain type='qemu'>
  <name>{escape(name)}</name>
  <uuid>{uuidlib.uuid4()}</uuid>
  <memory unit='MiB'>128</memory>
  <vcpu>1</vcpu>
  <os>
    <type arch='x86_64' machine='pc'>hvm</type>
    <kernel>{image.kernel}</kernel>
    <initrd>{image.initrd}</initrd>
    <cmdline>{cmdline}</cmdline>
  </os>
  <features><acpi/></features>
  <on_poweroff>destroy</on_poweroff>
  <on_reboot>{on_reboot}</on_reboot>
  <on_crash>destroy</on_crash>
  <devices>
    <emulator>/usr/bin/qemu-system-x86_64</emulator>
    <serial type='file'><source path='{console}'/><target port='0'/></serial>
    <memballoon model='none'/>
  </devices>
</domain>"""


class Guests:
    """Starts guests on a connection and removes every one at the end."""

    def __init__(self, conn: Any, image: GuestImage, console_dir: Path) -> None:
        self.conn = conn
        self.image = image
        self.console_dir = console_dir
        self.names: list[str] = []

    def start(self, name: str, flavour: str, *, persistent: bool = False, on_reboot: str = "destroy") -> Any:
        mode, delay = FLAVOURS[flavour]
        console = self.console(name)
        console.unlink(missing_ok=True)
        xml = guest_xml(name, self.image, console, mode, delay, on_reboot=on_reboot)
        self.names.append(name)
        if persistent:
            dom = self.conn.defineXML(xml)
            dom.create()
            return dom
        return self.conn.createXML(xml, 0)

    def reconnect(self, uri: str) -> None:
        """After a libvirtd restart: the old connection is dead."""
        with contextlib.suppress(libvirt.libvirtError):
            self.conn.close()
        self.conn = libvirt.open(uri)

    def console(self, name: str) -> Path:
        return self.console_dir / f"{name}.log"

    def output(self, name: str) -> str:
        try:
            return self.console(name).read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def wait_ready(self, *names: str, timeout: float = 60.0) -> None:
        end = time.monotonic() + timeout
        for name in names:
            while READY_MARK not in self.output(name):
                if time.monotonic() > end:
                    raise TimeoutError(f"guest {name} not ready in {timeout}s: {self.output(name)[-500:]!r}")
                time.sleep(0.05)

    def state(self, name: str) -> tuple[int, int] | None:
        try:
            return tuple(self.conn.lookupByName(name).state())  # type: ignore[return-value]
        except libvirt.libvirtError as exc:
            if exc.get_error_code() == libvirt.VIR_ERR_NO_DOMAIN:
                return None
            raise

    def cleanup(self, conn: Any | None = None) -> None:
        conn = conn or self.conn
        for name in self.names:
            try:
                dom = conn.lookupByName(name)
            except libvirt.libvirtError:
                continue
            try:
                if dom.isActive():
                    dom.destroy()
            except libvirt.libvirtError:
                pass
            try:
                if dom.isPersistent():
                    dom.undefineFlags(libvirt.VIR_DOMAIN_UNDEFINE_MANAGED_SAVE)
            except libvirt.libvirtError:
                pass
        self.names.clear()
