"""pytest fixtures: one control plane per test session (per xdist worker),
a namespace per test.  Import them into a conftest:

    from tests.cluster.fixtures import control_plane, namespace  # noqa: F401
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ._controlplane import ControlPlane
from ._namespace import Namespace

__all__ = ["control_plane", "namespace"]


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """etcd, kube-apiserver and kube-controller-manager, started once."""
    workdir: Path = tmp_path_factory.mktemp("cluster")
    with ControlPlane(workdir) as plane:
        yield plane


@pytest.fixture
def namespace(control_plane: ControlPlane) -> Iterator[Namespace]:
    """A fresh namespace with the plugin's ServiceAccount; deleted afterwards."""
    ns = Namespace(control_plane)
    try:
        yield ns
    finally:
        ns.cleanup()
