"""Fixtures: the test:///default driver for fast tests; a private libvirtd,
the tiny guest image and a guest factory for the real ones."""

from __future__ import annotations

import contextlib
import logging
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import libvirt
import pytest

from tests.libvirt.lv_daemon import Libvirtd, sweep_dead_runs
from tests.libvirt.lv_guestimage import GuestImage, build
from tests.libvirt.lv_guests import Guests

ARTIFACTS = Path(__file__).resolve().parents[1] / ".artifacts"


@pytest.fixture
def log() -> logging.Logger:
    return logging.getLogger("supervisor.plugin.libvirt")


@pytest.fixture
def testconn() -> Iterator[Any]:
    """A connection to test:///default, which keeps the driver's state alive
    (it is a process-wide singleton while a connection is open), and removes
    every domain a test defined."""
    libvirt.registerErrorHandler(lambda _c, _e: None, None)
    conn = libvirt.open("test:///default")
    before = {d.name() for d in conn.listAllDomains(0)}
    yield conn
    for dom in conn.listAllDomains(0):
        if dom.name() in before:
            continue
        if dom.isActive():
            dom.destroy()
        if dom.isPersistent():
            dom.undefineFlags(libvirt.VIR_DOMAIN_UNDEFINE_MANAGED_SAVE)
    conn.close()


@pytest.fixture(scope="session")
def guest_image() -> GuestImage:
    for tool in ("apt-get", "dpkg-deb", "cpio", "qemu-system-x86_64"):
        if shutil.which(tool) is None:
            pytest.fail(f"{tool} is missing: run the Makefile's setup (APT_PACKAGES)")
    return build(ARTIFACTS / "guest")


@pytest.fixture(scope="session")
def libvirtd() -> Iterator[Libvirtd]:
    if shutil.which("libvirtd") is None and not Path("/usr/sbin/libvirtd").exists():
        pytest.fail("libvirtd is missing: run the Makefile's setup (libvirt-daemon-system)")
    # Guests of a run killed before its cleanup would hold memory and CPU
    # on the machine for good.
    sweep_dead_runs()
    daemon = Libvirtd()
    try:
        daemon.start()
        yield daemon
    finally:
        daemon.cleanup()


@pytest.fixture
def guests(libvirtd: Libvirtd, guest_image: GuestImage) -> Iterator[Guests]:
    if not libvirtd.running:  # a test stopped it and failed before restarting
        libvirtd.start()
    libvirt.registerErrorHandler(lambda _c, _e: None, None)
    conn = libvirt.open(libvirtd.uri)
    factory = Guests(conn, guest_image, libvirtd.base / "console")
    yield factory
    try:
        if not libvirtd.running:
            libvirtd.start()
        fresh = libvirt.open(libvirtd.uri)
        factory.cleanup(fresh)
        fresh.close()
    finally:
        with contextlib.suppress(libvirt.libvirtError):
            conn.close()
