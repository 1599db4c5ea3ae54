"""Fixtures: a namespace on the real control plane (tests/cluster), reached
as a pod reaches it.

The plugin authenticates with a ServiceAccount token from the TokenRequest
API in a directory laid out as in a pod (``service_account_dir``) and finds
the server through KUBERNETES_SERVICE_HOST/PORT.  A test that asks for
``proxy`` gets the same, but through the fault-injecting proxy.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster import ControlPlane, FaultProxy, Namespace
from tests.cluster.fixtures import control_plane, namespace
from tests.kubernetes.k8s_helpers import KubeTarget

__all__ = ["control_plane", "kube", "namespace", "proxy"]


@pytest.fixture
def kube(
    control_plane: ControlPlane, namespace: Namespace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> KubeTarget:
    account = namespace.service_account_dir(tmp_path / "serviceaccount")
    target = KubeTarget(namespace, control_plane, account)
    for key, value in target.env.items():
        monkeypatch.setenv(key, value)
    return target


@pytest.fixture
def proxy(kube: KubeTarget, monkeypatch: pytest.MonkeyPatch) -> Iterator[FaultProxy]:
    """The fault proxy; from now on the plugin (and ``kube.env``) go through it."""
    faults = FaultProxy(kube.plane).start()
    kube.proxy = faults
    for key, value in kube.env.items():
        monkeypatch.setenv(key, value)
    try:
        yield faults
    finally:
        faults.stop()
