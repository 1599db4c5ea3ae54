"""The few API calls the plugin makes, made safe for a shutdown under trio.

The client (``_client``) is blocking, so every call runs in a worker thread
(one CapacityLimiter for the plugin) that trio may abandon when it is
cancelled, and every call carries a timeout no longer than the time the
deadline leaves hooks: an abandoned thread ends on its own before the
supervisor escalates to SIGKILL.  Objects are handled as plain JSON: parsing
thousands of endpoints into models costs time a drain does not have, and a
newer server's unknown fields cannot break a dict.

The client, and with it urllib3 and ssl, is imported when the plugin
connects (``load_client``), not when it is imported.
"""

from __future__ import annotations

import datetime
import math
import os
import urllib.parse
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import trio

from supervisor import Deadline

from ._errors import APIError
from ._settings import KubernetesSettings

if TYPE_CHECKING:
    # urllib3 and ssl load when the plugin connects, not when it is imported.
    from ._client import Client, Credentials, Watch

__all__ = ["APIError", "KubeAPI", "load_client", "micro_now"]

Obj = dict[str, Any]

# Worker threads the plugin may use at once: the Services' watch while the
# pod runs, the drain's watch, and a couple of short calls (an event, a
# lease) beside them.
_THREADS = 5
# A call needs at least this much time to be worth starting.
_MIN_CALL = 0.05
# A call ends this much before the hook is cancelled (a tenth of what hooks
# have left, at most this), so that one that runs out of time is reported
# as a failed call rather than cut off unreported.
_CALL_SLACK_MAX = 0.25
# Attempts of a read whose connection was dropped before any answer came.
# The pool may hold more than one connection that a server or a middlebox
# closed while the pod ran; each failed attempt discards one.
_READ_ATTEMPTS = 3
# Objects per LIST page: the server hands out a continue token past this
# many, so a namespace with thousands of slices costs several bounded
# requests rather than one unbounded answer.
PAGE_SIZE = 500

_SLICES = "/apis/discovery.k8s.io/v1/namespaces/{}/endpointslices"
_LEASES = "/apis/coordination.k8s.io/v1/namespaces/{}/leases"
_PODS = "/api/v1/namespaces/{}/pods"
_SERVICES = "/api/v1/namespaces/{}/services"
_EVENTS = "/apis/events.k8s.io/v1/namespaces/{}/events"


def micro_now() -> datetime.datetime:
    """Now, for MicroTime fields (Lease times, Event times), in UTC.

    Sent with exactly six fractional digits, as the API server parses
    MicroTime; a microsecond of 0 is kept off all the same, so that no
    serializer that drops a zero fraction can make the write fail."""
    now = datetime.datetime.now(datetime.UTC)
    return now if now.microsecond else now.replace(microsecond=1)


def load_client(settings: KubernetesSettings) -> tuple[Client, str | None]:
    """The client, and the kubeconfig context's namespace if any: in a pod
    (``KUBERNETES_SERVICE_HOST`` and no ``kubeconfig`` setting) from the
    ServiceAccount's files alone; otherwise from the kubeconfig setting, else
    $KUBECONFIG / ~/.kube/config, read by the ``kubernetes`` package.
    Blocking (file reads, maybe an exec credential plugin): call it in a
    thread."""
    from ._client import Client, in_cluster_credentials, kubeconfig_credentials

    namespace: str | None = None
    if settings.kubeconfig or not os.environ.get("KUBERNETES_SERVICE_HOST"):
        path = settings.kubeconfig or os.environ.get("KUBECONFIG", "").split(os.pathsep)[0] or None
        credentials, namespace = kubeconfig_credentials(path)
    else:
        credentials = in_cluster_credentials(settings.service_account_dir)
    return Client(credentials), namespace


def _path(template: str, namespace: str, name: str = "") -> str:
    path = template.format(urllib.parse.quote(namespace, safe=""))
    return f"{path}/{urllib.parse.quote(name, safe='')}" if name else path


class KubeAPI:
    """Deadline-bounded calls; every failure becomes an ``APIError``."""

    def __init__(self, client: Client, *, request_timeout: float) -> None:
        self.client = client
        self.request_timeout = request_timeout
        self.limiter = trio.CapacityLimiter(_THREADS)

    @property
    def credentials(self) -> Credentials:
        return self.client.credentials

    # -- plumbing ------------------------------------------------------------

    def timeout(self, deadline: Deadline | None, limit: float | None = None) -> float:
        """The time one call may take: the request timeout, cut to what the
        deadline leaves hooks."""
        seconds = self.request_timeout if limit is None else limit
        if deadline is not None:
            seconds = min(seconds, deadline.remaining_for_hooks() - deadline.slack(_CALL_SLACK_MAX))
        if seconds < _MIN_CALL:
            raise APIError("no time left before the shutdown deadline")
        return seconds

    async def _run(self, work: Callable[[float], Any], deadline: Deadline | None) -> Any:
        timeout = self.timeout(deadline)
        return await trio.to_thread.run_sync(_translated, work, timeout, abandon_on_cancel=True, limiter=self.limiter)

    async def _read(self, work: Callable[[float], Any], deadline: Deadline | None) -> Any:
        """``_run`` for a GET, tried again on a fresh connection when the
        connection was dropped before any answer.

        A kept-alive connection that a server or a load balancer closed while
        the pod ran idle fails the next request that way, and the read at
        SIGTERM comes after the longest idle time of all; client-go retries
        GETs on a reset or an EOF for the same reason.  A timeout is not
        retried (the next would outlive the deadline as well), nor is a write
        (the server may have applied it), and each attempt gets only what the
        deadline leaves."""
        attempts = 1
        while True:
            try:
                return await self._run(work, deadline)
            except APIError as exc:
                if not exc.dropped or attempts == _READ_ATTEMPTS:
                    raise
                attempts += 1

    async def _get(self, path: str, deadline: Deadline | None) -> Obj:
        result: Obj = await self._read(lambda timeout: self.client.request("GET", path, timeout), deadline)
        return result

    async def _list(self, path: str, label_selector: str | None, deadline: Deadline | None) -> tuple[list[Obj], str]:
        """Every matching object and the list's resourceVersion, page by page."""
        query = {"labelSelector": label_selector or ""}

        def work(timeout: float) -> tuple[list[Obj], str]:
            return self.client.list_all(path, timeout, query, PAGE_SIZE)

        result: tuple[list[Obj], str] = await self._read(work, deadline)
        return result

    # -- calls ---------------------------------------------------------------

    async def read_pod(self, namespace: str, name: str, deadline: Deadline | None = None) -> Obj:
        return await self._get(_path(_PODS, namespace, name), deadline)

    async def list_endpoint_slices(
        self, namespace: str, label_selector: str | None, deadline: Deadline | None = None
    ) -> tuple[list[Obj], str]:
        """Every matching slice and the list's resourceVersion, page by page."""
        return await self._list(_path(_SLICES, namespace), label_selector, deadline)

    async def list_services(self, namespace: str, deadline: Deadline | None = None) -> tuple[list[Obj], str]:
        """Every Service of the namespace and the list's resourceVersion."""
        return await self._list(_path(_SERVICES, namespace), None, deadline)

    @asynccontextmanager
    async def watch(
        self,
        path: str,
        label_selector: str | None,
        resource_version: str,
        timeout_seconds: int,
    ) -> AsyncIterator[trio.MemoryReceiveChannel[Obj | APIError]]:
        """Watch events (``{"type", "object"}`` with plain-dict objects,
        bookmarks included) from a worker thread.  The stream ends when the
        server closes it after ``timeout_seconds``; an error arrives as an
        ``APIError`` item (410 for an expired version) and ends it too."""
        send, receive = trio.open_memory_channel[Obj | APIError](math.inf)
        token = trio.lowlevel.current_trio_token()
        current: list[Watch] = []
        stopped = False
        query = {
            "labelSelector": label_selector or "",
            "resourceVersion": resource_version,
            "allowWatchBookmarks": True,
            "timeoutSeconds": timeout_seconds,
        }

        def forward(item: Obj | APIError) -> bool:
            try:
                trio.from_thread.run_sync(send.send_nowait, item, trio_token=token)
            except (trio.RunFinishedError, trio.BrokenResourceError, trio.ClosedResourceError):
                return False
            return True

        def stream() -> None:
            try:
                # (connect, read): a read may wait for a quiet server's close, never longer.
                watch = self.client.watch(path, query, self.request_timeout, timeout_seconds + 5)
                current.append(watch)
                if stopped:
                    watch.stop()
                for event in watch:
                    if not forward(event):
                        watch.stop()
            except Exception as exc:  # handed to the trio side
                forward(_as_api_error(exc))

        async def pump() -> None:
            try:
                await trio.to_thread.run_sync(stream, abandon_on_cancel=True, limiter=self.limiter)
            finally:
                send.close()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(pump)
            try:
                yield receive
            finally:
                # Shut the socket so the thread ends now rather than at the
                # server's timeout; trio has stopped waiting for it already.
                stopped = True
                for watch in current:
                    watch.stop()
                nursery.cancel_scope.cancel()

    @asynccontextmanager
    async def watch_endpoint_slices(
        self, namespace: str, label_selector: str | None, resource_version: str, timeout_seconds: int
    ) -> AsyncIterator[trio.MemoryReceiveChannel[Obj | APIError]]:
        async with self.watch(_path(_SLICES, namespace), label_selector, resource_version, timeout_seconds) as events:
            yield events

    @asynccontextmanager
    async def watch_services(
        self, namespace: str, resource_version: str, timeout_seconds: int
    ) -> AsyncIterator[trio.MemoryReceiveChannel[Obj | APIError]]:
        async with self.watch(_path(_SERVICES, namespace), None, resource_version, timeout_seconds) as events:
            yield events

    async def read_lease(self, namespace: str, name: str, deadline: Deadline | None = None) -> Obj:
        return await self._get(_path(_LEASES, namespace, name), deadline)

    async def list_leases(self, namespace: str, label_selector: str, deadline: Deadline | None = None) -> list[Obj]:
        items, _ = await self._list(_path(_LEASES, namespace), label_selector, deadline)
        return items

    async def replace_lease(self, namespace: str, name: str, lease: Obj, deadline: Deadline | None = None) -> Obj:
        """PUT the whole Lease; the server answers 409 if its resourceVersion
        is no longer current."""
        path = _path(_LEASES, namespace, name)
        result: Obj = await self._run(lambda timeout: self.client.request("PUT", path, timeout, body=lease), deadline)
        return result

    async def create_event(self, namespace: str, event: Obj, deadline: Deadline | None = None) -> None:
        path = _path(_EVENTS, namespace)
        await self._run(lambda timeout: self.client.request("POST", path, timeout, body=event), deadline)


def _translated(work: Callable[[float], Any], timeout: float) -> Any:
    try:
        return work(timeout)
    except APIError:
        raise
    except Exception as exc:
        raise _as_api_error(exc) from exc


def _as_api_error(exc: BaseException) -> APIError:
    """One readable line for anything the client raised."""
    if isinstance(exc, APIError):
        return exc
    return APIError(f"Kubernetes API call failed: {type(exc).__name__}: {exc}")
