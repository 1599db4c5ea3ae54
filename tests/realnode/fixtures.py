"""The real node, started once per test session.

Its tests share one node (kubelet's host-global paths allow one per machine)
and run one at a time: mark them ``pytest.mark.xdist_group("real-node")``
(``make test`` runs xdist with ``--dist loadgroup``, which sends a group to
one worker).  Import into a conftest:

    from tests.realnode.fixtures import real_node  # noqa: F401
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from . import _host
from ._cluster import RealNode

__all__ = ["real_node"]


@pytest.fixture(scope="session")
def real_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealNode]:
    """The cluster with its one real node, Ready; removed at the session's
    end, and the removal checked (a teardown error fails the run)."""
    with RealNode(tmp_path_factory.mktemp("real-node")) as node:
        yield node
    left = _host.leftovers(node.name)
    assert not left, f"the real node left {left}"
