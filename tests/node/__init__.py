"""A node without a kubelet, played by the tests: network namespaces for the
node and its pods, kube-proxy in the node's namespace, a stand-in kubelet
that runs each pod's container (the supervisor as PID 1 of a new PID
namespace) and reports to the real API server, and a load generator that
counts every failed request.  See README.md in this directory."""

from ._kube_proxy import KubeProxy, KubeProxyError
from ._kubelet import Kubelet, PodRecord
from ._netns import NetnsError, NodeNetwork, PodNetwork, in_netns
from ._node import SERVICE_RANGE, Load, Node
from ._pod import Container, PodError
from ._relay import Relay
from ._rollout import CONFIGS, Config, PodOutcome, Rollout, RolloutResult, run_rollout
from ._rules import RulesWatch, routed_ips

__all__ = [
    "CONFIGS",
    "SERVICE_RANGE",
    "Config",
    "Container",
    "KubeProxy",
    "KubeProxyError",
    "Kubelet",
    "Load",
    "NetnsError",
    "Node",
    "NodeNetwork",
    "PodError",
    "PodNetwork",
    "PodOutcome",
    "PodRecord",
    "Relay",
    "Rollout",
    "RolloutResult",
    "RulesWatch",
    "in_netns",
    "routed_ips",
    "run_rollout",
]
