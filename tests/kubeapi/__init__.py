"""A faithful Kubernetes API server for tests, and scenario helpers.

    from tests.kubeapi import KubeAPIServer, Cluster

``KubeAPIServer`` speaks the REST protocol over HTTPS to the real client
(see ``_server``); ``Cluster`` drives a namespace through the client, on the
test server or on a real cluster alike (see ``_scenarios``);
``LeaderElector`` is client-go's leader election for controllers and
standbys (see ``_leader``).
"""

from ._leader import LeaderElector, client_from
from ._scenarios import Cluster, Deletion, Endpoint, other_endpoints, pod_endpoints
from ._server import Fault, KubeAPIServer, Request
from ._store import ApiError, Store, micro_time

__all__ = [
    "ApiError",
    "Cluster",
    "Deletion",
    "Endpoint",
    "Fault",
    "KubeAPIServer",
    "LeaderElector",
    "Request",
    "Store",
    "client_from",
    "micro_time",
    "other_endpoints",
    "pod_endpoints",
]
