"""What happened to a namespace's pods, and when, on ``time.monotonic()``:
as the API server told it (``kubectl get pods --watch``: Ready, deletion,
removal) and as containerd saw it (``ctr events``: each container's exit, to
the nanosecond, with its status).

    with PodWatch(node, ns) as pods, TaskExits(node) as exits:
        ...
        track = pods.tracks["web-5d9f-abcde"]
        exited, status = exits.exit_of(track.container_id)

Both follow a subprocess, killed by PID at the end.  Times are taken when
the watch event arrives (the API gives the deletion only to the second);
containerd's exit times are wall-clock, converted once with the offset
between the two clocks at the start.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Self

from ._cluster import RealNode

__all__ = ["PodTrack", "PodWatch", "SliceWatch", "TaskExits", "follow_log", "logged_at", "wall_to_monotonic"]

_OFFSET = time.time() - time.monotonic()


def wall_to_monotonic(wall: float) -> float:
    return wall - _OFFSET


class _Follower:
    """A subprocess whose output lines a thread hands to ``line``."""

    def __init__(self, argv: list[str]) -> None:
        self._argv = argv
        self._proc: subprocess.Popen[str] | None = None
        self._thread: threading.Thread | None = None
        self.errors: list[str] = []
        self.changed = threading.Condition()

    def line(self, text: str, at: float) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        self._proc = subprocess.Popen(
            self._argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
        )
        self._thread = threading.Thread(target=self._read, daemon=True, name=f"follow-{self._argv[0]}")
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()
        if self._thread is not None:
            self._thread.join(10)

    def _read(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        for text in self._proc.stdout:
            try:
                self.line(text, time.monotonic())
            except (ValueError, KeyError) as exc:  # kept for the failure's message
                self.errors.append(f"{type(exc).__name__}: {exc}: {text[:200]!r}")
            with self.changed:
                self.changed.notify_all()

    def wait_for(self, predicate: Callable[[], bool], timeout: float) -> bool:
        with self.changed:
            return self.changed.wait_for(predicate, timeout)


@dataclass
class PodTrack:
    """One pod, as the watch saw it."""

    name: str
    uid: str
    ip: str = ""
    container_id: str = ""  # without "containerd://"
    ready: float | None = None
    deleted: float | None = None  # first seen with a deletionTimestamp
    gone: float | None = None  # the DELETED event
    grace: int | None = None  # deletionGracePeriodSeconds
    last: dict[str, Any] = field(default_factory=dict)  # the latest object


class PodWatch(_Follower):
    """``kubectl get pods --watch`` of one namespace."""

    def __init__(self, node: RealNode, namespace: str) -> None:
        watch = ("--watch", "--output-watch-events", "-o", "json")
        super().__init__(node.kubectl_argv("get", "pods", "-n", namespace, *watch))
        self.tracks: dict[str, PodTrack] = {}

    def line(self, text: str, at: float) -> None:
        # With --watch, kubectl prints each event as one line of JSON.
        event = json.loads(text)
        self._event(event["type"], event["object"], at)

    def _event(self, kind: str, pod: dict[str, Any], at: float) -> None:
        meta, status = pod["metadata"], pod.get("status", {})
        track = self.tracks.setdefault(meta["name"], PodTrack(meta["name"], meta["uid"]))
        track.last = pod
        track.ip = status.get("podIP") or track.ip
        for container in status.get("containerStatuses") or []:
            track.container_id = container.get("containerID", "").removeprefix("containerd://") or track.container_id
        conditions = {c["type"]: c["status"] for c in status.get("conditions") or []}
        if track.ready is None and conditions.get("Ready") == "True":
            track.ready = at
        if track.deleted is None and meta.get("deletionTimestamp"):
            track.deleted = at
            track.grace = meta.get("deletionGracePeriodSeconds")
        if kind == "DELETED" and track.gone is None:
            track.gone = at

    def ready(self, exclude: Iterable[str] = ()) -> list[PodTrack]:
        """The pods that are Ready and not being deleted."""
        skip = set(exclude)
        return [
            t
            for t in list(self.tracks.values())
            if t.ready is not None and t.deleted is None and t.gone is None and t.name not in skip
        ]


class TaskExits(_Follower):
    """``ctr events`` of the node's containerd: each task's exit."""

    def __init__(self, node: RealNode) -> None:
        super().__init__([str(node.bin_dir / "ctr"), f"--address={node.socket}", "events"])
        self.exits: dict[str, tuple[float, int]] = {}  # container ID → (exited, status)

    def line(self, text: str, at: float) -> None:
        # "2026-12-05 02:34:45.306 +0000 UTC k8s.io /tasks/exit {...}"
        head, sep, body = text.partition(" /tasks/exit ")
        if not sep or not head.endswith(" k8s.io"):
            return
        event = json.loads(body)
        exited = event["exited_at"]
        wall = int(exited.get("seconds", 0)) + int(exited.get("nanos", 0)) / 1e9
        # protobuf's JSON leaves a 0 status out.
        self.exits[event["container_id"]] = (wall_to_monotonic(wall), int(event.get("exit_status", 0)))

    def exit_of(self, container_id: str) -> tuple[float, int] | None:
        return self.exits.get(container_id)


class SliceWatch(_Follower):
    """``kubectl get endpointslices --watch`` of one namespace: when each
    address stopped being a ready endpoint of any slice."""

    def __init__(self, node: RealNode, namespace: str) -> None:
        watch = ("--watch", "--output-watch-events", "-o", "json")
        super().__init__(node.kubectl_argv("get", "endpointslices", "-n", namespace, *watch))
        self._ready: dict[str, set[str]] = {}  # slice name → its ready addresses
        self.left: dict[str, float] = {}  # address → when it stopped being ready

    def line(self, text: str, at: float) -> None:
        event = json.loads(text)
        before = set().union(*self._ready.values())
        name = event["object"]["metadata"]["name"]
        if event["type"] == "DELETED":
            self._ready.pop(name, None)
        else:
            self._ready[name] = {
                address
                for endpoint in event["object"].get("endpoints") or []
                if (endpoint.get("conditions") or {}).get("ready")
                for address in endpoint["addresses"]
            }
        now = set().union(*self._ready.values())
        for address in before - now:
            self.left[address] = at
        for address in now:
            self.left.pop(address, None)


@contextlib.contextmanager
def follow_log(node: RealNode, namespace: str, pod: str, path: Path) -> Iterator[Path]:
    """``kubectl logs -f --timestamps POD`` into ``path`` while in use (the
    kubelet removes a pod's log with the pod); waits for the container's
    end on the way out, 10 s at most."""
    with path.open("wb") as out:
        proc = subprocess.Popen(
            node.kubectl_argv("logs", "-f", "--timestamps", "-n", namespace, pod),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        try:
            yield path
        finally:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def logged_at(path: Path, text: str) -> float | None:
    """When the first line of a ``follow_log`` file that contains ``text``
    was written (the runtime's timestamp, on ``time.monotonic()``)."""
    for line in path.read_text(errors="replace").splitlines():
        stamp, _, message = line.partition(" ")
        if text in message:
            return wall_to_monotonic(datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp())
    return None
