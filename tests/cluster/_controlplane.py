"""etcd, kube-apiserver and kube-controller-manager on loopback.

The binaries come from ``build.sh`` (the pinned k8s.io/kubernetes module).
Every process listens on 127.0.0.1 only, on ports picked free at start, with
its data and logs in one directory.  Authentication is real: x509 client
certificates (the admin is in ``system:masters``, kube-controller-manager is
``system:kube-controller-manager`` and runs each controller under its own
ServiceAccount, as kubeadm sets it up) and ServiceAccount tokens from the
TokenRequest API; authorization is ``Node,RBAC``.

The flag set follows what controller-runtime's envtest gives kube-apiserver,
plus what a kubeadm cluster gives kube-controller-manager, cut to the
controllers the plugin's story needs: the EndpointSlice controllers (the drain
waits on them), ServiceAccounts and their tokens, namespace deletion and the
garbage collector (a namespace per test is deleted at its end).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import ssl
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

from supervisor._procstat import read_stat

from ._pki import PKI, ClientCert

__all__ = ["BUILD_SCRIPT", "DIE_WITH_PARENT", "ControlPlane", "ControlPlaneError", "binaries"]

BUILD_SCRIPT = Path(__file__).resolve().parent / "build.sh"
SERVICE_CIDRS = "10.96.0.0/16,fd00:10:96::/112"
ISSUER = "https://kubernetes.default.svc.cluster.local"
CONTROLLERS = (
    "endpointslice-controller",
    "endpointslice-mirroring-controller",
    "serviceaccount-controller",
    "serviceaccount-token-controller",
    "namespace-controller",
    "garbage-collector-controller",
    "root-ca-certificate-publisher-controller",
    # The rolling updates of tests/realnode: a real Deployment rollout.
    "deployment-controller",
    "replicaset-controller",
)
_STOP_TIMEOUT = 10.0


class ControlPlaneError(RuntimeError):
    """A component did not build, start or become ready; the message has its log's tail."""


def binaries() -> Path:
    """The directory with the built binaries (building them the first time)."""
    result = subprocess.run(["bash", str(BUILD_SCRIPT)], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise ControlPlaneError(f"{BUILD_SCRIPT} failed (exit {result.returncode}):\n{result.stderr[-4000:]}")
    return Path(result.stdout.strip().splitlines()[-1])


# Prefixed to every command: SIGTERM the child when the test process dies,
# so a killed test run (a CI timeout, a Ctrl-C'd xdist worker) leaves no
# control plane behind; the normal path stops each process by its PID.
# setpriv (util-linux) sets it and execs the command in the same process.
DIE_WITH_PARENT = ("setpriv", "--pdeathsig", "TERM", "--")


def _wait_stopped(pid: int, timeout: float = 10.0) -> None:
    """Until every thread of ``pid`` is in the stopped state: the SIGSTOP's
    group stop completes as each thread next enters the kernel, so a test
    must not rely on the hold before that (the kernel gives no event for
    it, hence the short poll)."""
    end = time.monotonic() + timeout
    while True:
        # /proc/TID/stat is each thread's own; one that ended meanwhile reads
        # as None and holds nothing up.
        stats = (read_stat(int(tid)) for tid in os.listdir(f"/proc/{pid}/task"))
        threads = [stat for stat in stats if stat is not None]
        if threads and all(stat.stopped for stat in threads):
            return
        if time.monotonic() > end:
            states = "".join(stat.state for stat in threads)
            raise ControlPlaneError(f"process {pid} was sent SIGSTOP but is not stopped after {timeout:g} s: {states}")
        time.sleep(0.001)


def free_port() -> int:
    """A port nobody listens on right now (the component binds it next)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class _Process:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    def tail(self, lines: int = 40) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        return ""


@dataclass
class ControlPlane:
    """One cluster: ``start()`` returns when the API serves and the
    controllers run; ``stop()`` ends every process it started, by PID."""

    workdir: Path
    bin_dir: Path = field(default_factory=binaries)
    processes: list[_Process] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.pki = PKI(self.workdir / "pki", self.serving_names())
        self.port = 0  # where the test process reaches kube-apiserver
        self.api_port = 0  # where kube-apiserver listens
        self.admin = self.pki.client("pid1-test-admin", "system:masters")
        self.admin_kubeconfig = self.workdir / "admin.kubeconfig"

    # -- lifecycle -----------------------------------------------------------

    def start(self, timeout: float = 120) -> Self:
        deadline = time.monotonic() + timeout
        try:
            etcd = self._start_etcd()
            self._start_apiserver(etcd)
            self._wait_ready(deadline)
            self._start_controller_manager()
            self._wait_controllers(deadline)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """SIGTERM each process (newest first), SIGKILL what outlives the timeout."""
        self.resume_controllers()
        for process in reversed(self.processes):
            if process.popen.poll() is None:
                process.popen.send_signal(signal.SIGTERM)
            try:
                process.popen.wait(_STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                process.popen.kill()
                process.popen.wait()
        self.processes.clear()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def pause_controllers(self, seconds: float) -> threading.Timer:
        """Freeze kube-controller-manager (SIGSTOP) for ``seconds``: a
        controller that lags behind, as a busy one does.  The EndpointSlice
        controller then reacts to what happened meanwhile once it runs again.
        ``cancel()`` on the returned timer, then ``resume_controllers()``, to
        end the pause early."""
        (kcm,) = [p for p in self.processes if p.name == "kube-controller-manager"]
        os.kill(kcm.popen.pid, signal.SIGSTOP)
        _wait_stopped(kcm.popen.pid)
        timer = threading.Timer(seconds, self.resume_controllers)
        timer.daemon = True
        timer.start()
        return timer

    def resume_controllers(self) -> None:
        for process in self.processes:
            if process.name == "kube-controller-manager" and process.popen.poll() is None:
                os.kill(process.popen.pid, signal.SIGCONT)

    @property
    def server(self) -> str:
        """kube-apiserver's URL for the test process."""
        return f"https://127.0.0.1:{self.port}"

    @property
    def internal_server(self) -> str:
        """kube-apiserver's URL for the cluster's own components."""
        return f"https://127.0.0.1:{self.api_port}"

    # -- components -------------------------------------------------------------

    # -- what a cluster elsewhere than on the host's loopback changes ------------

    def serving_names(self) -> tuple[str, ...]:
        """The extra names and addresses kube-apiserver's certificate holds."""
        return ()

    def command_prefix(self) -> tuple[str, ...]:
        """Put before every component's command."""
        return DIE_WITH_PARENT

    def free_port(self) -> int:
        return free_port()

    def expose_api(self) -> int:
        """The port the test process reaches kube-apiserver at (``api_port``)."""
        return self.api_port

    def apiserver_args(self) -> list[str]:
        # No reconciler for the `kubernetes` Service's endpoints: they would
        # name this host's address, and nothing here needs them.
        return ["--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", "--endpoint-reconciler-type=none"]

    def controllers(self) -> tuple[str, ...]:
        return CONTROLLERS

    # -- components -------------------------------------------------------------

    def spawn(self, name: str, args: Sequence[str], *, env: dict[str, str] | None = None) -> _Process:
        """Start the built binary ``name`` with ``args``; ``stop()`` ends it."""
        log = self.workdir / f"{name}.log"
        with log.open("ab") as out:
            popen = subprocess.Popen(
                [*self.command_prefix(), str(self.bin_dir / name), *args],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self.workdir,
                env=env,
                start_new_session=True,  # a Ctrl-C in the terminal reaches pytest only
            )
        process = _Process(name, popen, log)
        self.processes.append(process)
        return process

    def _start_etcd(self) -> str:
        client, peer = self.free_port(), self.free_port()
        self.spawn(
            "etcd",
            [
                "--name=pid1-test",
                f"--data-dir={self.workdir / 'etcd'}",
                f"--listen-client-urls=http://127.0.0.1:{client}",
                f"--advertise-client-urls=http://127.0.0.1:{client}",
                f"--listen-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-cluster=pid1-test=http://127.0.0.1:{peer}",
                "--listen-metrics-urls=",
                # A throw-away store: no fsync (etcd's own test setting).
                "--unsafe-no-fsync=true",
                "--log-level=warn",
            ],
        )
        return f"http://127.0.0.1:{client}"

    def _start_apiserver(self, etcd: str) -> None:
        pki = self.pki
        self.api_port = self.free_port()
        self.spawn(
            "kube-apiserver",
            [
                f"--etcd-servers={etcd}",
                *self.apiserver_args(),
                f"--secure-port={self.api_port}",
                f"--cert-dir={self.workdir / 'apiserver-certs'}",
                f"--tls-cert-file={pki.serving_cert}",
                f"--tls-private-key-file={pki.serving_key}",
                f"--client-ca-file={pki.ca}",
                f"--service-account-issuer={ISSUER}",
                f"--service-account-key-file={pki.sa_pub}",
                f"--service-account-signing-key-file={pki.sa_key}",
                f"--service-cluster-ip-range={SERVICE_CIDRS}",
                "--authorization-mode=Node,RBAC",
                "--allow-privileged=true",
                "--profiling=false",
                "--v=1",
            ],
        )
        self.port = self.expose_api()

    def _start_controller_manager(self) -> None:
        kcm = self.pki.client("system:kube-controller-manager")
        kubeconfig = self.write_kubeconfig(self.workdir / "kcm.kubeconfig", kcm, server=self.internal_server)
        self.spawn(
            "kube-controller-manager",
            [
                f"--kubeconfig={kubeconfig}",
                f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}",
                "--bind-address=127.0.0.1",
                f"--secure-port={self.free_port()}",
                f"--cert-dir={self.workdir / 'kcm-certs'}",
                f"--controllers={','.join(self.controllers())}",
                f"--service-account-private-key-file={self.pki.sa_key}",
                f"--root-ca-file={self.pki.ca}",
                "--use-service-account-credentials=true",
                "--leader-elect=false",
                f"--service-cluster-ip-range={SERVICE_CIDRS}",
                "--v=1",
            ],
        )

    # -- readiness ---------------------------------------------------------------

    def _check_alive(self) -> None:
        for process in self.processes:
            if process.popen.poll() is not None:
                raise ControlPlaneError(
                    f"{process.name} exited with {process.popen.returncode}; its log ends:\n{process.tail()}"
                )

    def _wait_ready(self, deadline: float) -> None:
        self.write_kubeconfig(self.admin_kubeconfig, self.admin)
        context = self.ssl_context(self.admin)
        last = ""
        while time.monotonic() < deadline:
            self._check_alive()
            try:
                with urllib.request.urlopen(f"{self.server}/readyz", context=context, timeout=5) as response:
                    if response.status == 200:
                        return
            except (OSError, urllib.error.URLError) as exc:
                last = str(exc)
            time.sleep(0.2)
        raise ControlPlaneError(f"kube-apiserver not ready ({last}); its log ends:\n{self.processes[-1].tail()}")

    def _wait_controllers(self, deadline: float) -> None:
        """The controllers run once the `default` ServiceAccount of `default` exists."""
        while time.monotonic() < deadline:
            self._check_alive()
            with contextlib.suppress(urllib.error.HTTPError):
                self.get("/api/v1/namespaces/default/serviceaccounts/default")
                return
            time.sleep(0.2)
        raise ControlPlaneError(
            "kube-controller-manager never created the default ServiceAccount; its log ends:\n"
            + self.processes[-1].tail()
        )

    # -- clients -----------------------------------------------------------------

    def ssl_context(self, cert: ClientCert | None = None) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.pki.ca))
        if cert is not None:
            context.load_cert_chain(str(cert.cert), str(cert.key))
        return context

    def admin_client(self) -> Any:
        """A ``kubernetes`` ApiClient authenticated with the admin certificate."""
        from kubernetes import client

        configuration = client.Configuration()
        configuration.host = self.server
        configuration.ssl_ca_cert = str(self.pki.ca)
        configuration.cert_file = str(self.admin.cert)
        configuration.key_file = str(self.admin.key)
        return client.ApiClient(configuration)

    def get(self, path: str) -> dict[str, Any]:
        """A GET as the admin (for readiness checks; tests use the clients)."""
        with urllib.request.urlopen(f"{self.server}{path}", context=self.ssl_context(self.admin), timeout=10) as r:
            data: dict[str, Any] = json.load(r)
        return data

    def write_kubeconfig(
        self, path: Path, cert: ClientCert | None = None, *, token: str | None = None, server: str | None = None
    ) -> Path:
        user: dict[str, str] = {}
        if cert is not None:
            user = {"client-certificate": str(cert.cert), "client-key": str(cert.key)}
        if token is not None:
            user = {"token": token}
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "pid1-test",
                    "cluster": {"server": server or self.server, "certificate-authority": str(self.pki.ca)},
                }
            ],
            "users": [{"name": "user", "user": user}],
            "contexts": [{"name": "pid1-test", "context": {"cluster": "pid1-test", "user": "user"}}],
            "current-context": "pid1-test",
        }
        path.write_text(json.dumps(config, indent=2))
        path.chmod(0o600)
        return path

    def kubectl(self, *args: str, kubeconfig: Path | None = None, input: str | None = None, check: bool = True) -> str:
        """Run the kubectl built from the same module; its stdout, or (with
        ``check``) CalledProcessError with stderr for a non-zero exit."""
        result = subprocess.run(
            [str(self.bin_dir / "kubectl"), f"--kubeconfig={kubeconfig or self.admin_kubeconfig}", *args],
            input=input,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            env={**os.environ, "KUBECTL_KUBERC": "false"},
        )
        if check and result.returncode != 0:
            raise subprocess.CalledProcessError(result.returncode, result.args, result.stdout, result.stderr)
        return result.stdout
