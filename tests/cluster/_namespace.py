"""A namespace per test on the shared control plane, and what tests do in it.

The test drives the cluster as its users and components would: Pods through
the ``Kubelet``, Services with selectors (the real EndpointSlice controller
publishes and flips their endpoints), Leases, Events, and a ServiceAccount
``supervisor`` whose token directory the plugin reads as a pod would.  That
account is bound to a Role with the rules of ``examples/kubernetes/rbac.yaml``
but for any Lease name and with ``list`` on leases (the selector mode);
the test that applies the example file itself binds its own account.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .kubelet import Kubelet, _raw

if TYPE_CHECKING:
    from ._controlplane import ControlPlane

__all__ = ["Namespace", "SliceWatch", "micro_time"]

_WATCHER = Path(__file__).with_name("_slicewatcher.py")

SERVICE_LABEL = "kubernetes.io/service-name"
ACCOUNT = "supervisor"

PLUGIN_RULES: list[dict[str, Any]] = [
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]},
    {"apiGroups": [""], "resources": ["services"], "verbs": ["list", "watch"]},
    {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list", "watch"]},
    {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "list", "update"]},
    {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create"]},
]


def micro_time(at: float | None = None) -> str:
    """A MicroTime as the API server writes it (six fractional digits)."""
    import datetime

    stamp = datetime.datetime.fromtimestamp(time.time() if at is None else at, datetime.UTC)
    return stamp.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class Namespace:
    """Created (with its ServiceAccount and Role) on construction; ``cleanup()``
    final-deletes the pods and deletes the namespace."""

    def __init__(
        self, plane: ControlPlane, name: str | None = None, *, rules: list[dict[str, Any]] | None = None
    ) -> None:
        import kubernetes

        # Untyped use on purpose: plain JSON in and out (_preload_content=False).
        client: Any = kubernetes.client

        self.plane = plane
        self.name = name or f"pid1-test-{uuid.uuid4().hex[:8]}"
        self.api_client: Any = plane.admin_client()
        self.core: Any = client.CoreV1Api(self.api_client)
        self.discovery: Any = client.DiscoveryV1Api(self.api_client)
        self.coordination: Any = client.CoordinationV1Api(self.api_client)
        self.events: Any = client.EventsV1Api(self.api_client)
        self.rbac: Any = client.RbacAuthorizationV1Api(self.api_client)
        self.exceptions: Any = client.exceptions
        self.core.create_namespace({"metadata": {"name": self.name}}, _preload_content=False).release_conn()
        self.kubelet = Kubelet(self.api_client, self.name)
        self.create_account(ACCOUNT, PLUGIN_RULES if rules is None else rules)
        self._cleanups: list[Callable[[], None]] = []
        self._wait_for_default_account()

    def _wait_for_default_account(self, timeout: float = 30) -> None:
        """Pods are admitted only once the ServiceAccount controller has made
        the namespace's ``default`` account, as on any cluster."""
        stop = time.monotonic() + timeout
        while True:
            try:
                self.core.read_namespaced_service_account("default", self.name, _preload_content=False).release_conn()
            except self.exceptions.ApiException as exc:
                if exc.status != 404 or time.monotonic() > stop:
                    raise
                time.sleep(0.02)
            else:
                return

    # -- RBAC and tokens -------------------------------------------------------

    def create_account(self, account: str, rules: list[dict[str, Any]] | None) -> None:
        """A ServiceAccount, bound to a Role of ``rules`` (None: no Role)."""
        self.core.create_namespaced_service_account(
            self.name, {"metadata": {"name": account}}, _preload_content=False
        ).release_conn()
        if rules is None:
            return
        self.rbac.create_namespaced_role(
            self.name, {"metadata": {"name": account}, "rules": rules}, _preload_content=False
        ).release_conn()
        binding = {
            "metadata": {"name": account},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": account},
            "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": self.name}],
        }
        self.rbac.create_namespaced_role_binding(self.name, binding, _preload_content=False).release_conn()

    def token(self, account: str = ACCOUNT, seconds: int = 3600) -> str:
        """A token from the TokenRequest API, as the kubelet mounts one."""
        request = {"spec": {"audiences": [], "expirationSeconds": seconds}}
        answer = _raw(
            self.core.create_namespaced_service_account_token(account, self.name, request, _preload_content=False)
        )
        return str(answer["status"]["token"])

    def service_account_dir(self, directory: Path, account: str = ACCOUNT) -> Path:
        """``token``, ``ca.crt`` and ``namespace``, laid out as in a pod."""
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "token").write_text(self.token(account))
        (directory / "ca.crt").write_bytes(self.plane.pki.ca.read_bytes())
        (directory / "namespace").write_text(self.name)
        return directory

    # -- pods and services -------------------------------------------------------

    def run_pod(
        self,
        name: str,
        *,
        ips: Sequence[str] = (),
        labels: Mapping[str, str] | None = None,
        grace: int = 30,
        ready: bool = True,
    ) -> dict[str, Any]:
        return self.kubelet.run_pod(name, labels=labels or {"app": name}, ips=ips, grace=grace, ready=ready)

    def create_service(
        self,
        name: str,
        selector: Mapping[str, str],
        *,
        publish_not_ready: bool = False,
        dual_stack: bool = False,
    ) -> dict[str, Any]:
        spec: dict[str, Any] = {
            "selector": dict(selector),
            "ports": [{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"}],
            "publishNotReadyAddresses": publish_not_ready,
        }
        if dual_stack:
            spec["ipFamilyPolicy"] = "RequireDualStack"
            spec["ipFamilies"] = ["IPv4", "IPv6"]
        body = {"metadata": {"name": name}, "spec": spec}
        return _raw(self.core.create_namespaced_service(self.name, body, _preload_content=False))

    def list_slices(self, service: str | None = None) -> list[dict[str, Any]]:
        selector = f"{SERVICE_LABEL}={service}" if service else None
        page = _raw(
            self.discovery.list_namespaced_endpoint_slice(self.name, label_selector=selector, _preload_content=False)
        )
        return list(page["items"])

    def pod_endpoints(self, pod_uid: str, service: str | None = None) -> list[dict[str, Any]]:
        return [
            endpoint
            for item in self.list_slices(service)
            for endpoint in item.get("endpoints") or []
            if (endpoint.get("targetRef") or {}).get("uid") == pod_uid
        ]

    def wait_endpoints(
        self,
        service: str,
        pods: Sequence[Mapping[str, Any]],
        *,
        slices: int = 1,
        timeout: float = 30,
    ) -> None:
        """Until the controller publishes a ready endpoint for each pod in
        ``slices`` slices (one per address family) of ``service``."""
        uids = {pod["metadata"]["uid"] for pod in pods}
        stop = time.monotonic() + timeout
        while True:
            found: dict[str, int] = dict.fromkeys(uids, 0)
            for item in self.list_slices(service):
                for endpoint in item.get("endpoints") or []:
                    uid = (endpoint.get("targetRef") or {}).get("uid")
                    if uid in found and (endpoint.get("conditions") or {}).get("ready"):
                        found[uid] += 1
            if all(count >= slices for count in found.values()):
                return
            if time.monotonic() > stop:
                raise AssertionError(f"no ready endpoints for {sorted(uids)} in {service}: {self.list_slices(service)}")
            time.sleep(0.05)

    def delete_pod(self, name: str, *, grace: int | None = None) -> dict[str, Any]:
        return self.kubelet.delete_pod(name, grace=grace)

    def watch_slices(self, pod: Mapping[str, Any]) -> SliceWatch:
        """Start watching for the controller to flip ``pod``'s endpoints."""
        watch = SliceWatch(self, str(pod["metadata"]["uid"]))
        watch.start()
        self._cleanups.append(watch.stop)
        return watch

    # -- leases and events -------------------------------------------------------

    def create_lease(
        self, name: str, holder: str, *, duration: int = 15, labels: Mapping[str, str] | None = None
    ) -> dict[str, Any]:
        stamp = micro_time()
        body = {
            "metadata": {"name": name, "labels": dict(labels or {})},
            "spec": {
                "holderIdentity": holder,
                "leaseDurationSeconds": duration,
                "acquireTime": stamp,
                "renewTime": stamp,
                "leaseTransitions": 3,
            },
        }
        return _raw(self.coordination.create_namespaced_lease(self.name, body, _preload_content=False))

    def read_lease(self, name: str) -> dict[str, Any]:
        return _raw(self.coordination.read_namespaced_lease(name, self.name, _preload_content=False))

    def replace_lease(self, lease: dict[str, Any]) -> dict[str, Any]:
        name = lease["metadata"]["name"]
        return _raw(self.coordination.replace_namespaced_lease(name, self.name, lease, _preload_content=False))

    def list_events(self, reporting_controller: str | None = None) -> list[dict[str, Any]]:
        """The namespace's events (events.k8s.io), or only those that
        ``reporting_controller`` reported: the control plane's own controllers
        write events of their own into a test's namespace too (a busy
        EndpointSlice controller warns on the Service, for one)."""
        items = _raw(self.events.list_namespaced_event(self.name, _preload_content=False))["items"]
        return [e for e in items if reporting_controller in (None, e.get("reportingController"))]

    def on_cleanup(self, callback: Callable[[], None]) -> None:
        self._cleanups.append(callback)

    def cleanup(self) -> None:
        for callback in reversed(self._cleanups):
            with contextlib.suppress(Exception):
                callback()
        with contextlib.suppress(self.exceptions.ApiException):
            self.kubelet.finish_all()
        # Not waited for: the namespace controller removes the rest.
        with contextlib.suppress(self.exceptions.ApiException):
            self.core.delete_namespace(self.name, _preload_content=False).release_conn()
        self.api_client.close()


@dataclass
class SliceWatch:
    """When every endpoint of the pod stopped routing (left its slice, or
    ``ready: false`` / ``terminating: true``): the EndpointSlice controller's
    flip, as a watcher of the server sees it.  The reference the drain tests
    and the benchmark measure the plugin against.

    The watch runs in a process of its own (``_slicewatcher.py``: standard
    library, raw JSON lines, the time taken as a line arrives) and watches
    with a label selector, as the plugin does.  What was measured, 20
    Services of 26 endpoints flipped at once:

    * the plugin in the supervisor's process (the benchmark), both cores
      busy: the former reference, the ``kubernetes`` client's watch in a
      thread of the test process turning every event into model objects,
      saw the last flip 810-820 ms after this one, which made the plugin look
      as if it stopped the main process 0.5-0.8 s before the flip; with this
      one SIGTERM came 38-69 ms after flip + propagation_delay;
    * the plugin in the test process: this one saw the flip 0-8 ms before
      the plugin (median 5 ms) with the machine otherwise shared; with two
      more busy loops, from 8 ms after to 26 ms before it (median 5 ms
      before), and with four, from 21 ms after to 314 ms before it: a busy
      machine delays either side, this one rarely and by little.
    """

    namespace: Namespace
    pod_uid: str
    flipped: threading.Event = field(default_factory=threading.Event)
    flipped_at: float | None = None  # time.monotonic() when seen
    _process: subprocess.Popen[str] | None = None
    _thread: threading.Thread | None = None

    def start(self, timeout: float = 30) -> None:
        plane = self.namespace.plane
        self._process = subprocess.Popen(
            [
                sys.executable,
                str(_WATCHER),
                plane.server,
                str(plane.pki.ca),
                str(plane.admin.cert),
                str(plane.admin.key),
                self.namespace.name,
                self.pod_uid,
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            text=True,
        )
        ready = threading.Event()
        self._thread = threading.Thread(target=self._read, args=(ready,), daemon=True, name="slice-watch")
        self._thread.start()
        if not ready.wait(timeout):
            self.stop()
            raise AssertionError(f"the slice watcher did not start watching within {timeout} s")

    def _read(self, ready: threading.Event) -> None:
        assert self._process is not None and self._process.stdout is not None
        for line in self._process.stdout:
            word, _, value = line.strip().partition(" ")
            if word == "ready":
                ready.set()
            elif word == "flipped":
                self.flipped_at = int(value) / 1e9
                self.flipped.set()
        ready.set()  # the process ended: start() need not wait on

    def wait_flipped(self, timeout: float = 30) -> float:
        if not self.flipped.wait(timeout):
            raise AssertionError("the EndpointSlice controller never flipped the pod's endpoints")
        assert self.flipped_at is not None
        return self.flipped_at

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            self._process.wait(10)
        if self._thread is not None:
            self._thread.join(10)
