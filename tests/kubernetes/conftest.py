"""Fixtures: a namespace on the test API server, or on a real cluster.

Without ``KUBECONFIG`` every test talks to ``tests.kubeapi.KubeAPIServer``
over HTTPS, configured in-cluster style (a service-account directory and
KUBERNETES_SERVICE_HOST/PORT).  With ``KUBECONFIG`` set the same tests run
against that cluster in a throw-away namespace; tests that need fault
injection (``fake`` fixture) are skipped there.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.kubeapi import Cluster, KubeAPIServer, client_from
from tests.kubernetes.k8s_helpers import KubeTarget


@pytest.fixture
def kube(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[KubeTarget]:
    namespace = f"pid1-test-{uuid.uuid4().hex[:8]}"
    kubeconfig = os.environ.get("KUBECONFIG")
    if kubeconfig:
        cluster = Cluster(client_from(kubeconfig=kubeconfig), namespace, real=True)
        cluster.create_namespace()
        target = KubeTarget(cluster, None, f"kubeconfig: {kubeconfig}", kubeconfig=kubeconfig)
        try:
            yield target
        finally:
            cluster.cleanup()
        return
    server = KubeAPIServer(namespace=namespace).start()
    try:
        account = server.write_service_account(tmp_path / "serviceaccount")
        for key, value in server.incluster_env().items():
            monkeypatch.setenv(key, value)
        cluster = Cluster(client_from(service_account_dir=str(account)), namespace)
        yield KubeTarget(
            cluster,
            server,
            f"service_account_dir: {account}",
            env=server.incluster_env(),
            service_account_dir=str(account),
        )
        cluster.cleanup()
    finally:
        server.close()


@pytest.fixture
def fake(kube: KubeTarget) -> KubeAPIServer:
    """The test API server itself, for fault injection; skips on a real cluster."""
    if kube.fake is None:
        pytest.skip("fault injection needs the test API server (KUBECONFIG is set)")
    return kube.fake
