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


@pytest.fixture(scope="module")
def node_and_api(
    control_plane: ControlPlane,  # noqa: F811 (the fixture above)
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[Node, Any]]:
    with Node.on(control_plane, tmp_path_factory.mktemp("node")) as both:
        yield both


@pytest.fixture
def node(node_and_api: tuple[Node, Any]) -> Node:
    return node_and_api[0]


@pytest.fixture
def admin_api(node_and_api: tuple[Node, Any]) -> Any:
    return node_and_api[1]
