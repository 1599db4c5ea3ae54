"""Build the project's image with the project's own tools and run containers.

Everything goes through ``tools/podman`` (the flags this kind of machine
needs), ``tools/local-base.sh`` (a base image without a registry) and
``tools/build-image.sh`` (what ``make image`` runs), so the tests exercise the
same pipeline a user does.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TOOLS = ROOT / "tools"
ARTIFACTS = ROOT / "tests" / ".artifacts"
PODMAN = TOOLS / "podman"
# Every container and image the tests create carries this label.
LABEL = "org.pid1-supervisor.test=1"

# Where the supervisor's layers end up in the image, and the OCI defaults the
# Dockerfile promises.
VENV = "/opt/supervisor"
ENTRYPOINT = f"{VENV}/bin/supervisor"
USER = "65532:65532"

# One image name per checkout: two checkouts on one machine (a developer's and
# CI's) never test each other's image, and a rebuild replaces only our own.
_CHECKOUT = hashlib.sha256(str(ROOT).encode()).hexdigest()[:10]
IMAGE = f"localhost/pid1-supervisor-test-{_CHECKOUT}"
DERIVED_IMAGE = f"localhost/pid1-supervisor-test-derived-{_CHECKOUT}"

_BUILD_TIMEOUT = 900.0
_COMMAND_TIMEOUT = 120.0


class PodmanError(AssertionError):
    """A podman command failed; the message has its output."""


def podman(*args: str, check: bool = True, timeout: float = _COMMAND_TIMEOUT) -> subprocess.CompletedProcess[str]:
    """Run ``tools/podman ARGS``; output is captured as text."""
    result = subprocess.run(
        [str(PODMAN), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    if check and result.returncode != 0:
        raise PodmanError(
            f"podman {' '.join(args)} exited {result.returncode}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
        )
    return result


def missing_prerequisites() -> list[str]:
    """What this machine lacks to build and run the image (``make test`` installs it)."""
    missing = [tool for tool in ("podman", "runc", "debootstrap") if shutil.which(tool) is None]
    if os.geteuid() != 0:
        missing.append("root (debootstrap and rootful podman)")
    return missing


def image_id(name: str) -> str | None:
    result = podman("image", "inspect", "--format", "{{.Id}}", name, check=False)
    return result.stdout.strip() if result.returncode == 0 else None


def build_ca_bundle() -> Path | None:
    """The CA bundle pip needs during a build behind a TLS-intercepting proxy.

    The same choice as ``tools/build-image.sh`` makes, for the derived image.
    """
    candidates = [os.environ.get(v, "") for v in ("PIP_CERT", "REQUESTS_CA_BUNDLE", "SSL_CERT_FILE")]
    candidates += ["/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt"]
    for candidate in candidates:
        if candidate and Path(candidate).is_file():
            return Path(candidate).resolve()
    return None


@dataclass(frozen=True)
class BuiltImage:
    name: str
    base: str
    size_report: str
    """The line ``tools/build-image.sh`` printed: name, size, share over the base."""

    @property
    def added_mib(self) -> float:
        """MiB the supervisor's layers add on top of the base image."""
        match = re.search(r"\(([\d.]+) MiB on top of ", self.size_report)
        if match is None:
            raise AssertionError(f"no size in the build report: {self.size_report!r}")
        return float(match.group(1))


def _run_tool(argv: Sequence[str], env: dict[str, str], log: Path) -> str:
    """Run a build tool, keeping its whole output in ``log``; returns stdout."""
    with log.open("w") as stderr:
        result = subprocess.run(
            list(argv),
            env=env,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            timeout=_BUILD_TIMEOUT,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    if result.returncode != 0:
        tail = "\n".join(log.read_text().splitlines()[-40:])
        raise PodmanError(f"{' '.join(argv)} exited {result.returncode} (log: {log})\n{tail}")
    return result.stdout.strip()


def build_image(plugins: Sequence[str] = ()) -> BuiltImage:
    """The local base (cached tarball) and the project's image from the
    working tree, with the optional ``plugins``.

    Podman's layer cache makes an unchanged tree a matter of seconds, and any
    change to a file in the build context rebuilds from that ``COPY`` on.
    """
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "ARTIFACTS": str(ARTIFACTS)}
    base = _run_tool([str(TOOLS / "local-base.sh")], env, ARTIFACTS / "local-base.log")
    name = "-".join([IMAGE, *plugins])
    previous = image_id(f"{name}:latest")
    report = _run_tool(
        [str(TOOLS / "build-image.sh"), "--label", LABEL],
        {**env, "BASE_IMAGE": base, "IMAGE": name, "PLUGINS": " ".join(plugins)},
        ARTIFACTS / f"image-build{'-' if plugins else ''}{'-'.join(plugins)}.log",
    )
    current = image_id(f"{name}:latest")
    if previous and previous != current:
        # The image of an older tree: nothing refers to it any more.
        podman("rmi", previous, check=False)
    return BuiltImage(name=f"{name}:latest", base=base, size_report=report)


def installed_plugins(listing: str) -> set[str]:
    """Plugin names from ``supervisor plugins``: ``NAME  (DISTRIBUTION VERSION)`` lines."""
    return set(re.findall(r"^(\S+)\s+\(\S+ [^)]*\)$", listing, re.MULTILINE))


def build_derived_image(base: BuiltImage, dockerfile: Path, context: Path) -> str:
    """``podman build`` of a user's image ``FROM`` the project's image."""
    ca = build_ca_bundle()
    ca_args = ["--volume", f"{ca}:/run/build-ca.crt:ro", "--build-arg", "PIP_CERT=/run/build-ca.crt"] if ca else []
    name = f"{DERIVED_IMAGE}:latest"
    previous = image_id(name)
    podman(
        *("build", "--label", LABEL, "--build-arg", f"SUPERVISOR_IMAGE={base.name}", *ca_args),
        *("--tag", name, "--file", str(dockerfile), str(context)),
        timeout=_BUILD_TIMEOUT,
    )
    if previous and previous != image_id(name):
        podman("rmi", previous, check=False)  # built from an older project image
    return name


@dataclass
class Container:
    name: str

    def logs(self) -> str:
        """What ``podman logs`` shows: the container's stdout and stderr."""
        result = podman("logs", self.name)
        return result.stdout + result.stderr

    def wait_for_log(self, pattern: str, timeout: float = 30.0) -> str:
        """The logs once ``pattern`` (a regex) appears in them."""
        give_up = time.monotonic() + timeout
        while True:
            logs = self.logs()
            if re.search(pattern, logs, re.MULTILINE):
                return logs
            if time.monotonic() > give_up:
                raise AssertionError(f"{pattern!r} not in the logs after {timeout}s:\n{logs}")
            time.sleep(0.2)

    def stop(self, seconds: int) -> float:
        """``podman stop -t SECONDS`` (STOPSIGNAL, SIGKILL after SECONDS, like
        the kubelet); returns how long it took."""
        started = time.monotonic()
        podman("stop", "-t", str(seconds), self.name, timeout=seconds + 60)
        return time.monotonic() - started

    def exit_code(self) -> int:
        result = podman("inspect", "--format", "{{.State.ExitCode}}", self.name)
        return int(result.stdout.strip())

    def exec(self, *argv: str) -> subprocess.CompletedProcess[str]:
        return podman("exec", self.name, *argv)

    def processes(self) -> list[tuple[int, str, str, int]]:
        """(pid, comm, state, ppid) of every process in the container."""
        stats = self.exec("sh", "-c", "for f in /proc/[0-9]*/stat; do cat $f 2>/dev/null; done").stdout
        table = []
        for line in stats.splitlines():
            head, _, tail = line.rpartition(")")
            pid, _, comm = head.partition(" (")
            state, ppid = tail.split()[:2]
            table.append((int(pid), comm, state, int(ppid)))
        return table


@dataclass
class Containers:
    """Starts containers and removes every one of them afterwards."""

    started: list[Container] = field(default_factory=list)

    def run(
        self, image: str, *args: str, options: Sequence[str] = (), timeout: float = 60.0
    ) -> subprocess.CompletedProcess[str]:
        """``podman run --rm IMAGE ARGS`` to completion."""
        container = Container(self._name())
        self.started.append(container)  # removed even if podman run times out
        return podman(
            "run",
            "--rm",
            "--name",
            container.name,
            "--label",
            LABEL,
            *options,
            image,
            *args,
            check=False,
            timeout=timeout,
        )

    def start(self, image: str, *args: str, options: Sequence[str] = ()) -> Container:
        """``podman run -d``: the container keeps running until stopped."""
        container = Container(self._name())
        self.started.append(container)
        podman("run", "-d", "--name", container.name, "--label", LABEL, *options, image, *args)
        return container

    def remove_all(self) -> None:
        for container in self.started:
            podman("rm", "--force", "--time", "0", container.name, check=False)
        self.started.clear()

    @staticmethod
    def _name() -> str:
        return f"pid1-test-{uuid.uuid4().hex[:12]}"
