"""Build the tiny test guest: Debian's cloud kernel plus a busybox initramfs.

The guest's init reads ``guest.mode=`` and ``guest.delay=`` from the kernel
command line, so one image serves every flavour:

* ``honour``: busybox ``acpid`` handles the ACPI power button and powers off
  ``guest.delay`` seconds after the press (0: at once);
* ``ignore``: no handler, the press goes nowhere (a stubborn guest).

It prints ``guest: ready`` on the serial console once the handler runs, so a
test can tell "booted" from "booting" (a press before that is lost).

Nothing is installed on the host: the kernel package is fetched with
``apt-get download`` and unpacked with ``dpkg-deb -x``; busybox comes from
the host's ``busybox-static``.  The result is cached under a directory keyed
by the kernel version.
"""

from __future__ import annotations

import gzip
import io
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

KERNEL_METAPACKAGE = "linux-image-cloud-amd64"
BUSYBOX = Path("/bin/busybox")
# Modules the power button needs: the ACPI button driver creates the input
# device, evdev exposes it as /dev/input/event* for acpid.
MODULES = ("kernel/drivers/acpi/button.ko", "kernel/drivers/input/evdev.ko")

READY_MARK = "guest: ready"

INIT = r"""#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
for module in $(cat /etc/modules); do
    insmod "/lib/modules/$module" || echo "guest: insmod $module failed"
done
mode=honour
delay=0
for word in $(cat /proc/cmdline); do
    case "$word" in
        guest.mode=*) mode="${word#guest.mode=}" ;;
        guest.delay=*) delay="${word#guest.delay=}" ;;
    esac
done
echo "$delay" > /etc/acpi-delay
if [ "$mode" = honour ]; then
    acpid -c /etc/acpi -l /dev/console
fi
# Give acpid a moment to open the input devices before announcing readiness.
sleep 0.2
echo "guest: ready mode=$mode delay=$delay"
while true; do sleep 3600; done
"""

POWER_BUTTON_ACTION = r"""#!/bin/sh
echo "guest: power button pressed"
sleep "$(cat /etc/acpi-delay)"
echo "guest: powering off"
poweroff -f
"""


@dataclass(frozen=True)
class GuestImage:
    kernel: Path
    initrd: Path
    version: str


def kernel_package() -> str:
    """The versioned package the cloud kernel metapackage depends on."""
    out = subprocess.run(
        ["apt-cache", "depends", KERNEL_METAPACKAGE],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    match = re.search(r"Depends:\s*(linux-image-\S+)", out)
    if match is None:
        raise RuntimeError(f"apt-cache depends {KERNEL_METAPACKAGE}: no kernel package in {out!r}")
    return match.group(1)


def build(cache: Path) -> GuestImage:
    """Return the kernel and initramfs, building them into ``cache`` once."""
    try:
        package = kernel_package()
    except (subprocess.CalledProcessError, RuntimeError):
        _refresh_package_lists()  # a fresh machine may not have read them yet
        package = kernel_package()
    image = _image(cache, package)
    if image.kernel.exists() and image.initrd.exists():
        return image
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        work = Path(tmp)
        if not _download(package, work):
            # Lists read a while ago may name a kernel the mirror has replaced.
            _refresh_package_lists()
            package = kernel_package()
            image = _image(cache, package)
            if not _download(package, work):
                raise RuntimeError(f"apt-get download {package} failed")
        deb = next(work.glob("linux-image-*.deb"))
        unpacked = work / "root"
        subprocess.run(["dpkg-deb", "-x", str(deb), str(unpacked)], check=True)
        staging = work / "out"
        staging.mkdir()
        shutil.copy(unpacked / "boot" / f"vmlinuz-{image.version}", staging / "vmlinuz")
        modules = unpacked / "lib" / "modules" / image.version
        (staging / "initrd.gz").write_bytes(_initramfs(modules))
        # Rename as a whole so that a concurrent builder never sees half a cache.
        try:
            staging.rename(image.kernel.parent)
        except OSError:
            if not image.kernel.exists():
                raise
    return image


def _image(cache: Path, package: str) -> GuestImage:
    version = package.removeprefix("linux-image-")
    return GuestImage(cache / version / "vmlinuz", cache / version / "initrd.gz", version)


def _download(package: str, directory: Path) -> bool:
    result = subprocess.run(["apt-get", "download", "-q", package], cwd=directory, capture_output=True, check=False)
    return result.returncode == 0


def _refresh_package_lists() -> None:
    subprocess.run(["apt-get", "update", "-qq"], capture_output=True, check=True)


def _module_order(modules: Path) -> list[Path]:
    """MODULES and their dependencies, dependencies first."""
    by_name = {p.name.removesuffix(".ko").replace("-", "_"): p for p in modules.rglob("*.ko")}
    order: list[Path] = []

    def visit(path: Path) -> None:
        if path in order:
            return
        data = path.read_bytes()
        match = re.search(rb"\x00depends=([^\x00]*)\x00", data)
        deps = match.group(1).decode().split(",") if match and match.group(1) else []
        for dep in deps:
            visit(by_name[dep.replace("-", "_")])
        order.append(path)

    for relative in MODULES:
        visit(modules / relative)
    return order


def _initramfs(modules: Path) -> bytes:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for d in ("bin", "dev", "proc", "sys", "etc/acpi/PWRF", "lib/modules", "tmp"):
            (root / d).mkdir(parents=True, exist_ok=True)
        shutil.copy(BUSYBOX, root / "bin" / "busybox")
        names = []
        for path in _module_order(modules):
            shutil.copy(path, root / "lib" / "modules" / path.name)
            names.append(path.name)
        (root / "etc" / "modules").write_text("\n".join(names) + "\n")
        _script(root / "init", INIT)
        # busybox acpid runs <confdir>/PWRF/00000080 for the power button.
        _script(root / "etc" / "acpi" / "PWRF" / "00000080", POWER_BUTTON_ACTION)
        files = sorted(str(p.relative_to(root)) for p in root.rglob("*"))
        archive = subprocess.run(
            ["cpio", "--quiet", "-o", "-H", "newc", "-R", "0:0"],
            input="\n".join(files).encode(),
            cwd=root,
            check=True,
            capture_output=True,
        ).stdout
    buffer = io.BytesIO()
    with gzip.GzipFile(fileobj=buffer, mode="wb", mtime=0) as gz:
        gz.write(archive)
    return buffer.getvalue()


def _script(path: Path, text: str) -> None:
    path.write_text(text)
    os.chmod(path, 0o755)


if __name__ == "__main__":
    import sys

    print(build(Path(sys.argv[1] if len(sys.argv) > 1 else "tests/.artifacts/guest")))
