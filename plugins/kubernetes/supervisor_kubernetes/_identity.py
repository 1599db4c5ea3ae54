"""Who this pod is: name, namespace, UID and IPs.

The downward API gives all four (POD_NAME, POD_NAMESPACE, POD_UID, POD_IP or
POD_IPS); without it the namespace comes from the service-account mount, the
name from the hostname (a pod's hostname is its name unless spec.hostname
overrides it) and the UID and IPs from a GET of the pod.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ._settings import PodSettings

__all__ = ["PodIdentity", "identity_from_environment"]


@dataclass(frozen=True)
class PodIdentity:
    name: str
    namespace: str
    uid: str = ""
    ips: tuple[str, ...] = ()
    # The pod's labels once read from the pod object (None: not read yet):
    # which Services select it.
    labels: tuple[tuple[str, str], ...] | None = None

    def completed_from(self, pod: Mapping[str, Any]) -> PodIdentity:
        """Fill the UID and IPs that the environment did not give, and the
        labels, from the pod object itself."""
        meta = pod.get("metadata") or {}
        status = pod.get("status") or {}
        ips = list(self.ips)
        for entry in status.get("podIPs") or []:
            if isinstance(entry, Mapping) and entry.get("ip"):
                ips.append(str(entry["ip"]))
        if status.get("podIP"):
            ips.append(str(status["podIP"]))
        return replace(
            self,
            uid=self.uid or str(meta.get("uid") or ""),
            ips=tuple(dict.fromkeys(ips)),
            labels=tuple(sorted((str(k), str(v)) for k, v in (meta.get("labels") or {}).items())),
        )


def identity_from_environment(
    pod: PodSettings,
    service_account_dir: str,
    environ: Mapping[str, str] | None = None,
    kubeconfig_namespace: str | None = None,
) -> PodIdentity:
    env = os.environ if environ is None else environ
    name = pod.name or env.get("POD_NAME") or socket.gethostname()
    namespace = (
        pod.namespace
        or env.get("POD_NAMESPACE")
        or _read(Path(service_account_dir) / "namespace")
        or kubeconfig_namespace
        or "default"
    )
    ips = list(pod.ips)
    for raw in (env.get("POD_IPS", ""), env.get("POD_IP", "")):
        ips.extend(ip.strip() for ip in raw.split(",") if ip.strip())
    return PodIdentity(
        name=name,
        namespace=namespace,
        uid=pod.uid or env.get("POD_UID", ""),
        ips=tuple(dict.fromkeys(ips)),
    )


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""
