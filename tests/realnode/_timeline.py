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

import json
import subprocess
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Self

from ._cluster import RealNode

__all__ = ["PodTrack", "PodWatch", "TaskExits", "wall_to_monotonic"]

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
