"""The stand-in kubelet: a Node that registers and heartbeats, binds the
pods of the namespaces it serves, runs them (``_pod.Container`` in a pod
network namespace), reports their status, and terminates them in the real
kubelet's order when they are deleted.  What it reproduces and what it
leaves out is listed in tests/node/README.md.

Per pod, in order:

1. an unscheduled pod of a served namespace is bound to this node (the
   Binding subresource, as kube-scheduler would with one node);
2. its network namespace is made, a ServiceAccount token is requested
   through the TokenRequest API, bound to the pod, and mounted at
   /var/run/secrets/kubernetes.io/serviceaccount with ``ca.crt`` and
   ``namespace``; ``KUBERNETES_SERVICE_HOST``/``PORT`` point at the API;
3. the container's ``command`` + ``args`` start as PID 1 with its ``env``
   (``value`` and downward-API ``fieldRef``s resolved);
4. status ``Running`` with ``podIP`` and ``Ready: False``; the
   ``readinessProbe`` (``httpGet``, from the node's namespace, every
   ``periodSeconds``) decides ``Ready``; without one it is ready at once;
5. on deletion (``deletionTimestamp`` set): the ``preStop`` hook (``exec``
   in the container's namespaces, or ``sleep``) with the grace period as its
   budget, then SIGTERM to PID 1, SIGKILL when the grace period (at least
   2 s after the SIGTERM, as the kubelet grants after a long preStop) is
   over, status with the container terminated and ``Ready: False``, and the
   final delete with grace 0 (UID precondition) that removes the Pod.
"""

from __future__ import annotations

import contextlib
import datetime
import http.client
import json
import logging
import shutil
import signal
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ._netns import PodNetwork, in_netns
from ._pod import Container, PodError
from ._relay import Relay
from ._site import NodeSite

__all__ = ["Kubelet", "PodRecord"]

log = logging.getLogger("tests.node.kubelet")
MIN_GRACE_AFTER_PRESTOP = 2.0


def now_rfc3339() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class PodRecord:
    """What happened to one pod, on time.monotonic()."""

    namespace: str
    name: str
    uid: str
    ip: str = ""
    labels: dict[str, str] = field(default_factory=dict)
    started: float | None = None
    ready: float | None = None
    deleted: float | None = None  # the watch event with deletionTimestamp
    prestop_done: float | None = None
    sigterm: float | None = None
    sigkill: float | None = None
    exited: float | None = None
    exit_status: int | None = None
    gone: float | None = None  # the final delete returned
    grace: float | None = None
    log: Path | None = None  # the container's output
    problems: list[str] = field(default_factory=list)


@dataclass
class _Pod:
    record: PodRecord
    spec: dict[str, Any]
    network: PodNetwork | None = None
    container: Container | None = None
    terminating: threading.Event = field(default_factory=threading.Event)
    done: threading.Event = field(default_factory=threading.Event)


class Kubelet:
    """Run with ``with Kubelet(...) as kubelet:``; ``serve(namespace)``
    adds a namespace whose unscheduled pods it binds."""

    def __init__(self, site: NodeSite, relay: Relay) -> None:
        """``relay``: how the pods' supervisors reach the API server."""
        from kubernetes import client

        self.api = site.api
        self.core: Any = client.CoreV1Api(site.api)
        self.coordination: Any = client.CoordinationV1Api(site.api)
        self.node_name = site.name
        self.network = site.network
        self.relay = relay
        self.ca_file = site.ca_file
        self.workdir = site.workdir
        self.namespaces: set[str] = set()
        self.records: dict[str, PodRecord] = {}
        self._pods: dict[str, _Pod] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._resource_version = ""
        self.errors: list[str] = []
        self.on_ready: Callable[[PodRecord], None] | None = None

    # -- node -------------------------------------------------------------------

    def __enter__(self) -> Kubelet:
        self._register()
        for target, name in ((self._heartbeat, "heartbeat"), (self._watch, "watch")):
            thread = threading.Thread(target=self._guard(target), daemon=True, name=f"kubelet-{name}")
            thread.start()
            self._threads.append(thread)
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def serve(self, namespace: str) -> None:
        with self._lock:
            self.namespaces.add(namespace)
        self._resync()

    def _guard(self, target: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                target()
            except Exception as exc:  # recorded: a test reads kubelet.errors
                if not self._stop.is_set():
                    log.exception("kubelet thread failed")
                    self.errors.append(f"{target.__name__}: {type(exc).__name__}: {exc}")

        return run

    def _register(self) -> None:
        from kubernetes import client

        node = client.V1Node(
            metadata=client.V1ObjectMeta(
                name=self.node_name,
                labels={"kubernetes.io/hostname": self.node_name, "kubernetes.io/os": "linux"},
            ),
        )
        self.core.create_node(node)
        self._post_node_status()
        self.coordination.create_namespaced_lease(
            "kube-node-lease",
            client.V1Lease(
                metadata=client.V1ObjectMeta(name=self.node_name),
                spec=client.V1LeaseSpec(
                    holder_identity=self.node_name,
                    lease_duration_seconds=40,
                    renew_time=datetime.datetime.now(datetime.UTC),
                ),
            ),
        )

    def _post_node_status(self) -> None:
        stamp = now_rfc3339()
        condition = {
            "type": "Ready",
            "status": "True",
            "reason": "KubeletReady",
            "message": "stand-in kubelet is posting ready status",
            "lastHeartbeatTime": stamp,
            "lastTransitionTime": stamp,
        }
        status = {
            "addresses": [
                {"type": "InternalIP", "address": self.network.gateway},
                {"type": "Hostname", "address": self.node_name},
            ],
            "conditions": [condition],
            "capacity": {"cpu": "2", "memory": "4Gi", "pods": "110"},
            "allocatable": {"cpu": "2", "memory": "4Gi", "pods": "110"},
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": _node_info(),
        }
        self.core.patch_node_status(self.node_name, {"status": status})

    def _heartbeat(self) -> None:
        # The kubelet renews its Lease every 10 s and posts status at least
        # every 5 min; without either the node lifecycle controller would mark
        # the node NotReady (after 50 s) and the pods unready.
        while not self._stop.wait(10):
            try:
                self.coordination.patch_namespaced_lease(
                    self.node_name, "kube-node-lease", {"spec": {"renewTime": _micro_now()}}
                )
                self._post_node_status()
            except Exception as exc:  # the next beat tries again, as the kubelet's does
                log.warning("node heartbeat failed: %s", exc)

    # -- pods -------------------------------------------------------------------

    def _watch(self) -> None:
        from kubernetes import watch
        from kubernetes.client.exceptions import ApiException

        while not self._stop.is_set():
            stream: Any = watch.Watch()  # type: ignore[no-untyped-call]
            try:
                self._resync()
                for event in stream.stream(
                    self.core.list_pod_for_all_namespaces,
                    resource_version=self._resource_version,
                    timeout_seconds=30,
                    allow_watch_bookmarks=True,
                    _request_timeout=60,
                ):
                    if self._stop.is_set():
                        return
                    obj = event["raw_object"]
                    if event["type"] == "ERROR":  # 410 Gone as an event: list again
                        self._resource_version = ""
                        break
                    self._resource_version = obj["metadata"].get("resourceVersion", self._resource_version)
                    if event["type"] in ("ADDED", "MODIFIED"):
                        self._handle(obj)
            except ApiException as exc:
                if exc.status != 410:
                    self._retry_later(exc)
                self._resource_version = ""
            except Exception as exc:  # a dropped connection: list and watch again, as a reflector does
                if self._stop.is_set():
                    return
                self._retry_later(exc)
            finally:
                stream.stop()

    def _retry_later(self, exc: Exception) -> None:
        log.warning("pod watch failed, listing again: %s", exc)
        self._stop.wait(0.5)

    def _resync(self) -> None:
        body = json.loads(self.core.list_pod_for_all_namespaces(_preload_content=False).data)
        self._resource_version = body["metadata"]["resourceVersion"]
        for pod in body["items"]:
            self._handle(pod)

    def _handle(self, obj: dict[str, Any]) -> None:
        meta, spec = obj["metadata"], obj["spec"]
        mine = spec.get("nodeName") == self.node_name
        # The watch thread and serve()'s resync both get here: decide under
        # the lock, so a pod is started once and its deletion seen once.
        with self._lock:
            served = meta["namespace"] in self.namespaces
            if not mine and not (served and not spec.get("nodeName")):
                return
            known = self._pods.get(meta["uid"])
            deleting = bool(meta.get("deletionTimestamp"))
            if known is None and not deleting:
                record = PodRecord(meta["namespace"], meta["name"], meta["uid"], labels=dict(meta.get("labels") or {}))
                pod = _Pod(record, spec)
                self._pods[meta["uid"]] = pod
                self.records[f"{meta['namespace']}/{meta['name']}"] = record
                self._spawn(self._run_pod, pod, obj, name=meta["name"])
                return
            if known is not None and deleting and not known.terminating.is_set():
                known.record.deleted = time.monotonic()
                known.record.grace = float(meta.get("deletionGracePeriodSeconds") or 0)
                known.terminating.set()
                return
        if known is None and deleting and mine:
            self._final_delete(meta)  # deleted before it ever ran here: nothing to stop

    def _spawn(self, target: Callable[..., None], *args: Any, name: str) -> None:
        thread = threading.Thread(target=self._guard(lambda: target(*args)), daemon=True, name=f"pod-{name}")
        thread.start()
        self._threads.append(thread)

    def _run_pod(self, pod: _Pod, obj: dict[str, Any]) -> None:
        record = pod.record
        try:
            if not obj["spec"].get("nodeName"):
                self._bind(record)
            self._start(pod, obj)
            self._until_ready(pod)
            pod.terminating.wait()
            self._terminate(pod)
        except (PodError, OSError) as exc:
            record.problems.append(str(exc))
            raise
        finally:
            self._teardown(pod)
            pod.done.set()

    def _bind(self, record: PodRecord) -> None:
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": record.name, "uid": record.uid},
            "target": {"apiVersion": "v1", "kind": "Node", "name": self.node_name},
        }
        # The generated client cannot read the Status the server answers
        # with; the raw call keeps the request exactly as kube-scheduler's.
        self.core.create_namespaced_pod_binding(record.name, record.namespace, body, _preload_content=False)

    def _start(self, pod: _Pod, obj: dict[str, Any]) -> None:
        record, spec = pod.record, obj["spec"]
        if len(spec["containers"]) != 1:
            raise PodError(f"{record.name}: the stand-in kubelet runs pods of exactly one container")
        container = spec["containers"][0]
        pod.network = self.network.add_pod(record.name)
        record.ip = pod.network.ip
        port = self.relay.listen(pod.network.name)
        directory = self.workdir / f"{record.namespace}-{record.name}"
        directory.mkdir(parents=True, exist_ok=True)
        token_dir = directory / "serviceaccount"
        token_dir.mkdir(exist_ok=True)
        if spec.get("automountServiceAccountToken", True):
            self._write_token(record, spec.get("serviceAccountName") or "default", token_dir)
        env = {
            "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "HOSTNAME": record.name,
            "KUBERNETES_SERVICE_HOST": "127.0.0.1",
            "KUBERNETES_SERVICE_PORT": str(port),
        }
        env.update(self._container_env(container, obj, record))
        command = [*(container.get("command") or []), *(container.get("args") or [])]
        if not command:
            raise PodError(f"{record.name}: no command (the stand-in kubelet has no images to take one from)")
        record.log = directory / "container.log"
        pod.container = Container(pod.network.name, record.name, command, env, token_dir, record.log)
        pod.container.start()
        record.started = pod.container.started_at
        self._patch_status(record, obj, ready=False)

    def _write_token(self, record: PodRecord, account: str, directory: Path) -> None:
        body = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {
                "audiences": [],
                "expirationSeconds": 3607,
                "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": record.name, "uid": record.uid},
            },
        }
        answer = self.core.create_namespaced_service_account_token(
            account, record.namespace, body, _preload_content=False
        )
        token = json.loads(answer.data)["status"]["token"]
        (directory / "token").write_text(token)
        shutil.copyfile(self.ca_file, directory / "ca.crt")
        (directory / "namespace").write_text(record.namespace)

    def _container_env(self, container: dict[str, Any], obj: dict[str, Any], record: PodRecord) -> dict[str, str]:
        fields = {
            "metadata.name": record.name,
            "metadata.namespace": record.namespace,
            "metadata.uid": record.uid,
            "spec.nodeName": self.node_name,
            "spec.serviceAccountName": obj["spec"].get("serviceAccountName") or "default",
            "status.podIP": record.ip,
            "status.podIPs": record.ip,
            "status.hostIP": self.network.gateway,
        }
        env: dict[str, str] = {}
        for item in container.get("env") or []:
            if "value" in item:
                env[item["name"]] = str(item["value"])
                continue
            ref = (item.get("valueFrom") or {}).get("fieldRef")
            if ref is None or ref.get("fieldPath") not in fields:
                raise PodError(f"{record.name}: env {item['name']}: only value and these fieldRefs: {sorted(fields)}")
            env[item["name"]] = fields[ref["fieldPath"]]
        return env

    def _patch_status(
        self, record: PodRecord, obj: dict[str, Any], *, ready: bool, exit_code: int | None = None
    ) -> None:
        container = obj["spec"]["containers"][0]
        stamp = now_rfc3339()
        state: dict[str, Any] = {"running": {"startedAt": stamp}}
        if exit_code is not None:
            state = {"terminated": {"exitCode": exit_code, "reason": "Completed" if exit_code == 0 else "Error"}}
        flag = "True" if ready else "False"
        conditions = [
            {"type": "PodReadyToStartContainers", "status": "True"},
            {"type": "Initialized", "status": "True"},
            {"type": "ContainersReady", "status": flag},
            {"type": "Ready", "status": flag},
            {"type": "PodScheduled", "status": "True"},
        ]
        for condition in conditions:
            condition["lastTransitionTime"] = stamp
        status = {
            "phase": "Running",
            "hostIP": self.network.gateway,
            "hostIPs": [{"ip": self.network.gateway}],
            "podIP": record.ip,
            "podIPs": [{"ip": record.ip}],
            "startTime": stamp,
            "conditions": conditions,
            "containerStatuses": [
                {
                    "name": container["name"],
                    "image": container.get("image", ""),
                    "imageID": "",
                    "ready": ready,
                    "started": exit_code is None,
                    "restartCount": 0,
                    "state": state,
                }
            ],
        }
        self.core.patch_namespaced_pod_status(record.name, record.namespace, {"status": status})

    def _until_ready(self, pod: _Pod) -> None:
        assert pod.container is not None and pod.network is not None
        container = pod.spec["containers"][0]
        probe = container.get("readinessProbe")
        obj = {"spec": pod.spec}
        if probe is not None:
            get = probe.get("httpGet")
            if get is None:
                raise PodError(f"{pod.record.name}: the stand-in kubelet probes readiness with httpGet only")
            port = _port(get["port"], container)
            period = float(probe.get("periodSeconds", 10))
            timeout = float(probe.get("timeoutSeconds", 1))
            if pod.terminating.wait(float(probe.get("initialDelaySeconds", 0))):
                return
            while not _http_ok(self.network.name, pod.network.ip, port, get.get("path", "/"), timeout):
                if not pod.container.running:
                    raise PodError(f"{pod.record.name}: the container exited before it was ready")
                if pod.terminating.wait(period):
                    return
        ready_at = time.monotonic()
        self._patch_status(pod.record, obj, ready=True)
        # Set only once the API server has it, so that whoever sees the
        # record ready also reads Ready=True from the server.
        pod.record.ready = ready_at
        if self.on_ready is not None:
            self.on_ready(pod.record)

    def _terminate(self, pod: _Pod) -> None:
        record, container, deleted = pod.record, pod.container, pod.record.deleted
        assert container is not None and deleted is not None
        grace = record.grace or 0.0
        deadline = deleted + grace
        hook = (pod.spec["containers"][0].get("lifecycle") or {}).get("preStop")
        if hook and container.running and grace > 0:
            if "exec" in hook:
                container.exec(hook["exec"]["command"], timeout=deadline - time.monotonic())
            elif "sleep" in hook:
                self._stop.wait(min(float(hook["sleep"]["seconds"]), max(deadline - time.monotonic(), 0)))
            else:
                record.problems.append(f"preStop {sorted(hook)} is not run by the stand-in kubelet")
            record.prestop_done = time.monotonic()
            deadline = max(deadline, record.prestop_done + MIN_GRACE_AFTER_PRESTOP)
        record.sigterm = time.monotonic()
        container.signal(signal.SIGTERM)
        if not container.wait(max(deadline - time.monotonic(), 0)):
            record.sigkill = time.monotonic()
            container.kill()
        container.wait(30)
        record.exited, record.exit_status = container.exited_at, container.exit_status
        with contextlib.suppress(Exception):
            self._patch_status(record, {"spec": pod.spec}, ready=False, exit_code=_exit_code(container.exit_status))
        self._final_delete({"name": record.name, "namespace": record.namespace, "uid": record.uid})
        record.gone = time.monotonic()

    def _final_delete(self, meta: dict[str, Any]) -> None:
        from kubernetes.client.exceptions import ApiException

        body = {"gracePeriodSeconds": 0, "preconditions": {"uid": meta["uid"]}}
        try:
            self.core.delete_namespaced_pod(meta["name"], meta["namespace"], body=body)
        except ApiException as exc:
            if exc.status not in (404, 409):
                raise

    def _teardown(self, pod: _Pod) -> None:
        if pod.container is not None and pod.container.running:
            pod.container.kill()
        if pod.network is not None:
            self.relay.forget(pod.network.name)
            self.network.remove_pod(pod.network.name)

    def wait_gone(self, keys: Iterable[str], timeout: float) -> bool:
        """Block until the pods ("namespace/name") have been removed."""
        end = time.monotonic() + timeout
        with self._lock:
            pods = {f"{p.record.namespace}/{p.record.name}": p for p in self._pods.values()}
        for key in keys:
            pod = pods.get(key)
            if pod is None or not pod.done.wait(max(end - time.monotonic(), 0)):
                return False
        return True

    def close(self) -> None:
        self._stop.set()
        with self._lock:
            pods = list(self._pods.values())
        for pod in pods:
            if not pod.done.is_set() and pod.container is not None:
                pod.container.kill()
            if pod.network is not None:
                self.network.remove_pod(pod.network.name)
        with contextlib.suppress(Exception):
            self.core.delete_node(self.node_name)
        with contextlib.suppress(Exception):
            self.coordination.delete_namespaced_lease(self.node_name, "kube-node-lease")


def _port(port: int | str, container: dict[str, Any]) -> int:
    if isinstance(port, int) or str(port).isdigit():
        return int(port)
    for item in container.get("ports") or []:
        if item.get("name") == port:
            return int(item["containerPort"])
    raise PodError(f"no container port named {port}")


def _http_ok(netns: str, address: str, port: int, path: str, timeout: float) -> bool:
    """One readiness probe, from the node's namespace as the kubelet's are."""

    def probe() -> bool:
        connection = http.client.HTTPConnection(address, port, timeout=timeout)
        try:
            connection.request("GET", path, headers={"User-Agent": "kube-probe/1.35"})
            return 200 <= connection.getresponse().status < 400
        except (OSError, http.client.HTTPException):
            return False
        finally:
            connection.close()

    return in_netns(netns, probe)


def _exit_code(status: int | None) -> int:
    if status is None:
        return 137
    return 128 - status if status < 0 else status


def _micro_now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _node_info() -> dict[str, str]:
    return {
        "architecture": "amd64",
        "operatingSystem": "linux",
        "kubeletVersion": "v1.35.4",
        "kubeProxyVersion": "",
        "containerRuntimeVersion": "pid1-supervisor-tests://0",
        "kernelVersion": "",
        "osImage": "",
        "machineID": "",
        "systemUUID": "",
        "bootID": "",
    }
