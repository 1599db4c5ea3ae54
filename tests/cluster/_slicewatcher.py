"""The process behind ``SliceWatch``: when did the EndpointSlice controller
flip a pod's endpoints, as a watcher of the API server sees it?

Run by path with the standard library only (no ``kubernetes``, no model
classes, nothing of the test process)::

    python _slicewatcher.py SERVER CA CERT KEY NAMESPACE POD_UID

It lists the namespace's slices, then watches those of the Services the
pod is in (a label selector, as the plugin under test watches) from the
list's version, resuming when the server ends the watch.  Standard output:
``ready`` once the watch is open, then ``flipped <CLOCK_MONOTONIC ns>`` when
no endpoint of the pod routes any more (gone, ``ready: false`` or
``terminating: true``), and it exits.

Why a process of its own, reading raw lines: a reference watch in the test
process competes with the plugin for that interpreter's lock, and the
``kubernetes`` client's watch turns every event into model objects, which
for 20 slices flipped at once left it 0.8 s behind on a busy machine.  Here the time is
taken as the event's line arrives, before it is parsed; CLOCK_MONOTONIC is
the same clock in every process of the machine.
"""

from __future__ import annotations

import http.client
import json
import ssl
import sys
import time
import urllib.parse
from typing import Any

SERVICE_LABEL = "kubernetes.io/service-name"
_WATCH_SECONDS = 60


class _Server:
    def __init__(self, server: str, ca: str, cert: str, key: str, namespace: str) -> None:
        address = urllib.parse.urlsplit(server)
        self.host, self.port = address.hostname or "127.0.0.1", address.port or 443
        self.context = ssl.create_default_context(cafile=ca)
        self.context.load_cert_chain(cert, key)
        self.path = f"/apis/discovery.k8s.io/v1/namespaces/{namespace}/endpointslices"

    def get(self, query: dict[str, str]) -> http.client.HTTPResponse:
        connection = http.client.HTTPSConnection(
            self.host, self.port, context=self.context, timeout=_WATCH_SECONDS + 10
        )
        connection.request("GET", f"{self.path}?{urllib.parse.urlencode(query)}")
        response = connection.getresponse()
        if response.status != 200:
            raise SystemExit(f"slicewatcher: HTTP {response.status}: {response.read()[:300]!r}")
        return response


def routes(slices: dict[str, Any], uid: str) -> bool:
    """Whether an endpoint of the pod still takes new connections (KEP-1672:
    only an explicit ``ready: false`` or ``terminating: true`` stops it)."""
    for item in slices.values():
        for endpoint in item.get("endpoints") or []:
            conditions = endpoint.get("conditions") or {}
            if (
                (endpoint.get("targetRef") or {}).get("uid") == uid
                and conditions.get("ready") is not False
                and conditions.get("terminating") is not True
            ):
                return True
    return False


def _selector(slices: dict[str, Any], uid: str) -> str:
    services = {
        str((item["metadata"].get("labels") or {}).get(SERVICE_LABEL, ""))
        for item in slices.values()
        if any((e.get("targetRef") or {}).get("uid") == uid for e in item.get("endpoints") or [])
    }
    if "" in services or not services:
        return ""  # a slice without a Service label: watch them all
    return f"{SERVICE_LABEL} in ({','.join(sorted(services))})"


def watch(server: _Server, uid: str) -> int:
    listing = json.loads(server.get({}).read())
    slices = {item["metadata"]["name"]: item for item in listing["items"]}
    version = str(listing["metadata"]["resourceVersion"])
    query = {"watch": "1", "allowWatchBookmarks": "true", "timeoutSeconds": str(_WATCH_SECONDS)}
    if selector := _selector(slices, uid):
        query["labelSelector"] = selector
    announced = False
    while True:
        response = server.get({**query, "resourceVersion": version})
        if not announced:
            print("ready", flush=True)
            announced = True
        while line := response.readline():
            seen = time.monotonic_ns()
            event = json.loads(line)
            obj = event["object"]
            if event["type"] == "ERROR":
                raise SystemExit(f"slicewatcher: watch error: {obj}")
            version = str(obj["metadata"]["resourceVersion"])
            if event["type"] == "DELETED":
                slices.pop(obj["metadata"]["name"], None)
            elif event["type"] in ("ADDED", "MODIFIED"):
                slices[obj["metadata"]["name"]] = obj
            if not routes(slices, uid):
                print(f"flipped {seen}", flush=True)
                return 0


if __name__ == "__main__":
    server_url, ca_file, cert_file, key_file, namespace_name, pod_uid = sys.argv[1:7]
    sys.exit(watch(_Server(server_url, ca_file, cert_file, key_file, namespace_name), pod_uid))
