"""The plugin's one connection to the API server: the client and this pod.

Loaded once, on first use, under a lock (the background hook and a SIGTERM
that comes early may both ask for it), and kept for the run.  Loading the
client reads files and may run an exec credential plugin: it runs in a
worker thread that a deadline may abandon.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import trio

from supervisor import Deadline

from ._api import APIError, KubeAPI, load_client
from ._identity import PodIdentity, identity_from_environment
from ._settings import KubernetesSettings

__all__ = ["Connection", "Connector"]


@dataclass
class Connection:
    """The client and this pod, once known (the UID and IPs may be filled in
    later, from a read of the pod)."""

    api: KubeAPI
    pod: PodIdentity


class Connector:
    """Makes the ``Connection`` once and hands out the same one after."""

    def __init__(self) -> None:
        self._lock = trio.Lock()
        self.connection: Connection | None = None

    async def connect(
        self, settings: KubernetesSettings, log: logging.Logger, deadline: Deadline | None = None
    ) -> Connection:
        """The connection; ``APIError`` if it cannot be made (in the time
        ``deadline`` leaves hooks, when given)."""
        async with self._lock:
            if self.connection is not None:
                return self.connection
            limit = deadline.remaining_for_hooks() if deadline is not None else math.inf
            with trio.move_on_after(limit) as scope:
                client, namespace = await trio.to_thread.run_sync(load_client, settings, abandon_on_cancel=True)
            if scope.cancelled_caught:
                raise APIError("no time left to load the Kubernetes client")
            pod = identity_from_environment(settings.pod, settings.service_account_dir, kubeconfig_namespace=namespace)
            self.connection = Connection(KubeAPI(client, request_timeout=settings.request_timeout), pod)
            log.debug("connected as pod %s/%s", pod.namespace, pod.name)
            return self.connection
