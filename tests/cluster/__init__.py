"""A real Kubernetes control plane for the tests, and the tests' kubelet.

    from tests.cluster import ControlPlane, Namespace, Kubelet, FaultProxy

``ControlPlane`` starts etcd, kube-apiserver and kube-controller-manager
(built by ``build.sh`` from the pinned k8s.io/kubernetes module) on loopback;
``Namespace`` is one test's namespace on it; ``Kubelet`` plays the node's
kubelet (see ``kubelet``); ``FaultProxy`` is an HTTPS proxy in front of the
API server that injects faults; ``Manager`` runs the controller-runtime
manager workload.  ``python -m tests.cluster`` starts a cluster by hand.
"""

from ._controlplane import BUILD_SCRIPT, ControlPlane, ControlPlaneError, binaries
from ._namespace import Namespace, SliceWatch, micro_time
from .crmanager import Manager, ManagerFlags, manager_command, read_report
from .faultproxy import FaultProxy, Rule
from .kubelet import NODE_NAME, Kubelet

__all__ = [
    "BUILD_SCRIPT",
    "NODE_NAME",
    "ControlPlane",
    "ControlPlaneError",
    "FaultProxy",
    "Kubelet",
    "Manager",
    "ManagerFlags",
    "Namespace",
    "Rule",
    "SliceWatch",
    "binaries",
    "manager_command",
    "micro_time",
    "read_report",
]
