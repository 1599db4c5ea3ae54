"""Fixtures: the real control plane (tests/cluster, one per test session)
and a node on it (tests/node): kube-proxy in the node's network namespace and
the stand-in kubelet that runs the pods."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.cluster import ControlPlane
from tests.cluster.fixtures import control_plane  # noqa: F401 (a fixture)
from tests.node import Node

SERVICE_RANGE = "10.96.0.0/16"  # the IPv4 half of the control plane's --service-cluster-ip-range


@pytest.fixture(scope="module")
def admin_api(control_plane: ControlPlane) -> Any:  # noqa: F811 (the fixture above)
    from kubernetes import config

    return config.new_client_from_config(config_file=str(control_plane.admin_kubeconfig))


@pytest.fixture(scope="module")
def node(
    control_plane: ControlPlane,  # noqa: F811
    admin_api: Any,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Node]:
    with Node.start(
        admin_api,
        api_port=control_plane.port,
        ca_file=control_plane.pki.ca,
        service_range=SERVICE_RANGE,
        kube_proxy=control_plane.bin_dir / "kube-proxy",
        workdir=tmp_path_factory.mktemp("node"),
    ) as node:
        yield node
