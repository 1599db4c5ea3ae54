"""The few API calls the plugin makes, made safe for a shutdown under trio.

The ``kubernetes`` client is synchronous, so every call runs in a worker
thread (one CapacityLimiter for the plugin) that trio may abandon when it is
cancelled, and every call carries a ``_request_timeout`` no longer than the
time the deadline leaves hooks: an abandoned thread ends on its own before the
supervisor escalates to SIGKILL.  Objects are handled as plain JSON (``_preload_content=False``):
parsing thousands of endpoints into models costs time a drain does not have,
and a newer server's unknown fields cannot break a dict.

``kubernetes`` is imported here only, and this module only when the plugin is
enabled.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import math
import os
import socket
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import trio

from supervisor import Deadline

from ._settings import KubernetesSettings

__all__ = ["APIError", "KubeAPI", "micro_now"]

Obj = dict[str, Any]

# Worker threads the plugin may use at once: a watch, and a couple of short
# calls (an event, a lease) beside it.
_THREADS = 4
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


class APIError(Exception):
    """The API could not be used: unreachable, refused (401/403), or an
    error status.  ``status`` is the HTTP code, None when no answer came;
    ``dropped``: the connection was closed or reset before any answer."""

    def __init__(self, message: str, status: int | None = None, *, dropped: bool = False) -> None:
        super().__init__(message)
        self.status = status
        self.dropped = dropped

    @property
    def forbidden(self) -> bool:
        return self.status in (401, 403)


def micro_now() -> datetime.datetime:
    """Now, for MicroTime fields (Lease times, Event times).

    The client serializes datetimes with ``isoformat()``, which drops the
    fraction when microsecond is 0, and the API server parses MicroTime with
    exactly six fractional digits: such a write would fail with a 400 once in
    a million calls.
    """
    now = datetime.datetime.now(datetime.UTC)
    return now if now.microsecond else now.replace(microsecond=1)


def load_client(settings: KubernetesSettings) -> tuple[Any, str | None]:
    """An ApiClient from the kubeconfig setting, else the in-cluster service
    account, else $KUBECONFIG / ~/.kube/config; and the kubeconfig context's
    namespace, if any.  Blocking (file reads, maybe an exec credential
    plugin): call it in a thread."""
    import urllib3
    from kubernetes import client, config
    from kubernetes.config.config_exception import ConfigException
    from kubernetes.config.incluster_config import InClusterConfigLoader

    configuration = client.Configuration()
    namespace: str | None = None
    try:
        if settings.kubeconfig or not os.environ.get("KUBERNETES_SERVICE_HOST"):
            path = settings.kubeconfig or os.environ.get("KUBECONFIG", "").split(os.pathsep)[0] or None
            if path is None and not Path(config.KUBE_CONFIG_DEFAULT_LOCATION).expanduser().exists():
                raise APIError("no in-cluster configuration (KUBERNETES_SERVICE_HOST is not set) and no kubeconfig")
            config.load_kube_config(  # type: ignore[no-untyped-call]
                config_file=path, client_configuration=configuration
            )
            _, active = config.list_kube_config_contexts(  # type: ignore[no-untyped-call]
                config_file=path
            )
            namespace = (active or {}).get("context", {}).get("namespace")
        else:
            directory = Path(settings.service_account_dir)
            loader = InClusterConfigLoader(  # type: ignore[no-untyped-call]
                token_filename=str(directory / "token"), cert_filename=str(directory / "ca.crt")
            )
            loader.load_and_set(configuration)  # type: ignore[no-untyped-call]
    except (ConfigException, OSError, ValueError) as exc:
        raise APIError(f"cannot configure the Kubernetes client: {exc}") from exc
    # Retries are ours to bound by the deadline: a read that timed out is not
    # tried again (it would outlive the deadline); a refused connect is, once;
    # a GET whose connection was dropped unanswered is, by KubeAPI._read.
    configuration.retries = urllib3.Retry(total=1, connect=1, read=0, status=0, redirect=0, other=0)
    return client.ApiClient(configuration), namespace


class KubeAPI:
    """Deadline-bounded calls; every failure becomes an ``APIError``."""

    def __init__(self, api_client: Any, *, request_timeout: float) -> None:
        from kubernetes import client

        self.api_client = api_client
        self.request_timeout = request_timeout
        self.limiter = trio.CapacityLimiter(_THREADS)
        # Any: with _preload_content=False these return raw responses, not
        # the models their signatures promise.
        self._core: Any = client.CoreV1Api(api_client)
        self._discovery: Any = client.DiscoveryV1Api(api_client)
        self._coordination: Any = client.CoordinationV1Api(api_client)
        self._events: Any = client.EventsV1Api(api_client)

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

    # -- calls ---------------------------------------------------------------

    async def read_pod(self, namespace: str, name: str, deadline: Deadline | None = None) -> Obj:
        def work(timeout: float) -> Obj:
            return _json(
                self._core.read_namespaced_pod(name, namespace, _preload_content=False, _request_timeout=timeout)
            )

        result: Obj = await self._read(work, deadline)
        return result

    async def list_endpoint_slices(
        self, namespace: str, label_selector: str | None, deadline: Deadline | None = None
    ) -> tuple[list[Obj], str]:
        """Every matching slice and the list's resourceVersion, page by page."""

        def work(timeout: float) -> tuple[list[Obj], str]:
            items: list[Obj] = []
            token: str | None = None
            while True:
                page = _json(
                    self._discovery.list_namespaced_endpoint_slice(
                        namespace,
                        label_selector=label_selector,
                        limit=PAGE_SIZE,
                        _continue=token,
                        _preload_content=False,
                        _request_timeout=timeout,
                    )
                )
                items.extend(page.get("items") or [])
                meta = page.get("metadata") or {}
                token = meta.get("continue") or None
                if token is None:
                    return items, str(meta.get("resourceVersion") or "")

        result: tuple[list[Obj], str] = await self._read(work, deadline)
        return result

    @asynccontextmanager
    async def watch_endpoint_slices(
        self,
        namespace: str,
        label_selector: str | None,
        resource_version: str,
        timeout_seconds: int,
    ) -> AsyncIterator[trio.MemoryReceiveChannel[Obj | APIError]]:
        """Watch events (``{"type", "object"}`` with plain-dict objects,
        bookmarks included) from a worker thread.  The stream ends when the
        server closes it after ``timeout_seconds``; an error arrives as an
        ``APIError`` item (410 for an expired version) and ends it too."""
        from kubernetes import client, watch

        # A connection pool of its own: stopping a watch shuts its socket
        # down, and such a socket must never go back to the shared pool, where
        # the next request would write to it (EPIPE, and a SIGPIPE for the
        # whole supervisor).
        watch_client = client.ApiClient(self.api_client.configuration)
        discovery = client.DiscoveryV1Api(watch_client)
        send, receive = trio.open_memory_channel[Obj | APIError](math.inf)
        # return_type=object: events keep plain dicts, but the client still
        # tracks versions and turns ERROR events into exceptions.
        watcher = _stoppable(watch.Watch)(return_type=object)
        token = trio.lowlevel.current_trio_token()

        def forward(item: Obj | APIError) -> None:
            try:
                trio.from_thread.run_sync(send.send_nowait, item, trio_token=token)
            except (trio.RunFinishedError, trio.BrokenResourceError, trio.ClosedResourceError):
                watcher.stop()

        def stream() -> None:
            try:
                for event in watcher.stream(
                    discovery.list_namespaced_endpoint_slice,
                    namespace,
                    label_selector=label_selector,
                    resource_version=resource_version,
                    allow_watch_bookmarks=True,
                    timeout_seconds=timeout_seconds,
                    # (connect, read): a read may wait for a quiet server's
                    # close, never longer.
                    _request_timeout=(self.request_timeout, timeout_seconds + 5),
                ):
                    forward({"type": event["type"], "object": event["raw_object"]})
            except Exception as exc:  # handed to the trio side
                forward(_as_api_error(exc))
            finally:
                watch_client.close()  # type: ignore[no-untyped-call]

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
                watcher.stop()
                nursery.cancel_scope.cancel()

    async def read_lease(self, namespace: str, name: str, deadline: Deadline | None = None) -> Obj:
        def work(timeout: float) -> Obj:
            return _json(
                self._coordination.read_namespaced_lease(
                    name, namespace, _preload_content=False, _request_timeout=timeout
                )
            )

        result: Obj = await self._read(work, deadline)
        return result

    async def list_leases(self, namespace: str, label_selector: str, deadline: Deadline | None = None) -> list[Obj]:
        def work(timeout: float) -> list[Obj]:
            page = _json(
                self._coordination.list_namespaced_lease(
                    namespace,
                    label_selector=label_selector,
                    _preload_content=False,
                    _request_timeout=timeout,
                )
            )
            return list(page.get("items") or [])

        result: list[Obj] = await self._read(work, deadline)
        return result

    async def replace_lease(self, namespace: str, name: str, lease: Obj, deadline: Deadline | None = None) -> Obj:
        """PUT the whole Lease; the server answers 409 if its resourceVersion
        is no longer current."""

        def work(timeout: float) -> Obj:
            return _json(
                self._coordination.replace_namespaced_lease(
                    name, namespace, lease, _preload_content=False, _request_timeout=timeout
                )
            )

        result: Obj = await self._run(work, deadline)
        return result

    async def create_event(self, namespace: str, event: Obj, deadline: Deadline | None = None) -> None:
        def work(timeout: float) -> None:
            _json(
                self._events.create_namespaced_event(namespace, event, _preload_content=False, _request_timeout=timeout)
            )

        await self._run(work, deadline)


def _stoppable(base: Any) -> Any:
    """``Watch`` whose ``stop()`` shuts only the reading side of the socket.

    The client's own ``stop()`` shuts both sides, and TLS then writes its
    closing alert into a socket that cannot be written: EPIPE, raised as a
    SIGPIPE that the supervisor would take for one sent to it.  Shutting the
    reading side wakes the blocked read all the same.
    """

    class Watch(base):  # type: ignore[misc]
        def stop(self) -> None:
            self._stop = True
            connection = getattr(getattr(self, "_resp", None), "connection", None)
            sock = getattr(connection, "sock", None)
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RD)

    return Watch


def _json(response: Any) -> Obj:
    try:
        data = json.loads(response.data)
    finally:
        response.release_conn()
    if not isinstance(data, dict):
        raise APIError("the API server answered with something other than a JSON object")
    return data


def _translated(work: Callable[[float], Any], timeout: float) -> Any:
    try:
        return work(timeout)
    except APIError:
        raise
    except Exception as exc:
        raise _as_api_error(exc) from exc


def _as_api_error(exc: BaseException) -> APIError:
    """One readable line for anything the client or the network raised."""
    from kubernetes.client.exceptions import ApiException

    if isinstance(exc, APIError):
        return exc
    if isinstance(exc, ApiException):
        message = _status_message(exc.body) or str(exc.reason or "").strip()
        status = exc.status if isinstance(exc.status, int) and exc.status else None
        return APIError(f"HTTP {status}: {message}" if status else message, status)
    from urllib3.exceptions import ProtocolError

    # urllib3 wraps the cause: "Max retries exceeded ... (Caused by NewConnectionError(...))".
    reason = getattr(exc, "reason", None)
    detail = str(reason) if reason else str(exc)
    # ProtocolError: the connection was closed or reset with no answer (a
    # read timeout is a ReadTimeoutError, and a refused connect is not one).
    dropped = isinstance(exc, ProtocolError) or isinstance(reason, ProtocolError)
    return APIError(f"API server unreachable: {type(exc).__name__}: {detail}", dropped=dropped)


def _status_message(body: object) -> str:
    if isinstance(body, bytes):
        body = body.decode(errors="replace")
    if not isinstance(body, str) or not body:
        return ""
    try:
        status = json.loads(body)
    except ValueError:
        return body.strip()[:200]
    if isinstance(status, Mapping):
        return str(status.get("message") or status.get("reason") or "")
    return ""
