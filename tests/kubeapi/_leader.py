"""client-go leader election, in Python, for the controller and the standby
of the scenarios.

``tryAcquireOrRenew`` as in ``k8s.io/client-go/tools/leaderelection``: a
Lease is free when its holder is empty, or when the record has not changed
for ``leaseDurationSeconds`` of *local* time since this candidate last saw it
change; the holder renews by writing ``renewTime``; every write carries the
resourceVersion just read, so two candidates can never both win.
``tests.kubeapi.controller`` runs one as a fake controller process.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["LeaderElector", "client_from"]


def _micro_now() -> datetime.datetime:
    now = datetime.datetime.now(datetime.UTC)
    return now if now.microsecond else now.replace(microsecond=1)


def client_from(*, service_account_dir: str | None = None, kubeconfig: str | None = None) -> Any:
    """An ApiClient the way a pod would build one (in-cluster) or from a kubeconfig."""
    from kubernetes import client, config
    from kubernetes.config.incluster_config import InClusterConfigLoader

    configuration = client.Configuration()
    if kubeconfig:
        config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)  # type: ignore[no-untyped-call]
    else:
        directory = Path(service_account_dir or "/var/run/secrets/kubernetes.io/serviceaccount")
        InClusterConfigLoader(  # type: ignore[no-untyped-call]
            token_filename=str(directory / "token"), cert_filename=str(directory / "ca.crt")
        ).load_and_set(configuration)
    return client.ApiClient(configuration)


class LeaderElector:
    """One candidate for one Lease."""

    def __init__(
        self,
        api_client: Any,
        namespace: str,
        name: str,
        identity: str,
        *,
        lease_duration: int = 15,
        retry_period: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        from kubernetes import client

        self._api: Any = client.CoordinationV1Api(api_client)
        self._exceptions: Any = client.exceptions
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.lease_duration = lease_duration
        self.retry_period = retry_period
        self._clock = clock
        self._observed: tuple[Any, ...] | None = None
        self._observed_time = 0.0
        self.acquired_at: float | None = None  # monotonic time of the first success
        self.leading = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def try_acquire_or_renew(self) -> bool:
        now = self._clock()
        try:
            lease = json.loads(
                self._api.read_namespaced_lease(
                    self.name, self.namespace, _preload_content=False, _request_timeout=5
                ).data
            )
        except self._exceptions.ApiException as exc:
            if exc.status != 404:
                return False
            return self._create(now)
        spec = lease.get("spec") or {}
        record = tuple(
            spec.get(k)
            for k in (
                "holderIdentity",
                "leaseDurationSeconds",
                "acquireTime",
                "renewTime",
                "leaseTransitions",
            )
        )
        if record != self._observed:
            self._observed, self._observed_time = record, now
        holder = spec.get("holderIdentity") or ""
        duration = spec.get("leaseDurationSeconds") or self.lease_duration
        if holder and holder != self.identity and self._observed_time + duration > now:
            return False  # held by another, and still valid
        stamp = _micro_now()
        transitions = spec.get("leaseTransitions") or 0
        new_spec = {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": self.lease_duration,
            "acquireTime": spec.get("acquireTime") if holder == self.identity else stamp,
            "renewTime": stamp,
            "leaseTransitions": transitions if holder == self.identity else transitions + 1,
        }
        lease["spec"] = {k: v for k, v in new_spec.items() if v is not None}
        try:
            self._api.replace_namespaced_lease(self.name, self.namespace, lease, _request_timeout=5)
        except self._exceptions.ApiException:
            return False  # 409: somebody else wrote first
        self._observed_time = now
        self._won(now)
        return True

    def _create(self, now: float) -> bool:
        stamp = _micro_now()
        body = {
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": self.lease_duration,
                "acquireTime": stamp,
                "renewTime": stamp,
                "leaseTransitions": 0,
            },
        }
        try:
            self._api.create_namespaced_lease(self.namespace, body, _request_timeout=5)
        except self._exceptions.ApiException:
            return False
        self._won(now)
        return True

    def _won(self, now: float) -> None:
        if self.acquired_at is None:
            self.acquired_at = now
        self.leading = True

    # -- running in the background ---------------------------------------------

    def start(self) -> LeaderElector:
        """Acquire, then renew, every ``retry_period`` in a thread."""
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"elector-{self.identity}")
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            # A failed attempt is just retried, as client-go does.
            with contextlib.suppress(Exception):
                self.try_acquire_or_renew()
            self._stop.wait(self.retry_period)

    def stop(self) -> None:
        """Stop campaigning *without* releasing (a crash, or no ReleaseOnCancel)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)

    def wait_until_leading(self, timeout: float = 10.0) -> None:
        end = time.monotonic() + timeout
        while not self.leading:
            if time.monotonic() > end:
                raise AssertionError(f"{self.identity} did not acquire {self.namespace}/{self.name}")
            time.sleep(0.01)
