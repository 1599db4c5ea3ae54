"""A faithful Kubernetes API server for tests, and scenario helpers.

from tests.kubeapi import KubeAPIServer
"""

from ._server import Fault, KubeAPIServer, Request
from ._store import ApiError, Store, micro_time

__all__ = ["ApiError", "Fault", "KubeAPIServer", "Request", "Store", "micro_time"]
