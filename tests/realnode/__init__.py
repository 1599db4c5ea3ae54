"""A real Kubernetes node for the tests: kubelet and containerd running pods
of real images, with the whole cluster in one network namespace.  See
README.md in this directory.

    from tests.realnode import RealNode
"""

from ._cluster import NODE_NAME, PAUSE_IMAGE, RealNode, namespace

__all__ = ["NODE_NAME", "PAUSE_IMAGE", "RealNode", "namespace"]
