"""The controller-runtime manager (``go/cmd/crmanager``) as a process.

    manager = Manager(plane, namespace, "ctrl-0", lease="leader").start()
    manager.wait_leading()
    manager.stop()                 # SIGTERM, as the kubelet (or the supervisor) sends it

Its JSON lines on stdout are read in a thread; ``events`` maps each event
name to the first time.time() it was reported at (the manager's own clock
reading, taken when it happened).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Required, TypedDict, Unpack

if TYPE_CHECKING:
    from ._controlplane import ControlPlane

__all__ = ["Manager", "ManagerFlags", "manager_command", "read_report"]


def read_report(path: Path) -> dict[str, float]:
    """A ``--report`` file: each event's first time.time()."""
    events: dict[str, float] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                event = json.loads(line)
            except ValueError:
                continue
            events.setdefault(event["event"], event["unix_nano"] / 1e9)
    return events


class ManagerFlags(TypedDict, total=False):
    """The crmanager's flags beyond its namespace: the Lease it elects
    itself with (required), and what a test or a benchmark varies."""

    lease: Required[str]
    identity: str | None  # default: $POD_NAME and a random suffix, as controller-runtime does
    release_on_cancel: bool  # give the Lease up when stopped (LeaderElectionReleaseOnCancel)
    retry_period: float | None  # seconds between the standby's tries
    kubeconfig: Path | None  # default: $KUBECONFIG
    report: Path | None  # a file the manager appends its events to


def manager_command(plane: ControlPlane, namespace: str, **flags: Unpack[ManagerFlags]) -> list[str]:
    """The crmanager command line (for a supervisor's ``processes:`` too)."""
    argv = [str(plane.bin_dir / "crmanager"), f"--namespace={namespace}", f"--lease={flags['lease']}"]
    kubeconfig, report, identity = flags.get("kubeconfig"), flags.get("report"), flags.get("identity")
    retry_period = flags.get("retry_period")
    if kubeconfig is not None:
        argv.append(f"--kubeconfig={kubeconfig}")
    if report is not None:
        argv.append(f"--report={report}")
    if identity:
        argv.append(f"--identity={identity}")
    if flags.get("release_on_cancel"):
        argv.append("--release-on-cancel")
    if retry_period is not None:
        argv.append(f"--retry-period={retry_period}s")
    return argv


# What client-go's elector logs (klog, level 0) as it starts trying for the Lease.
_ATTEMPTING = "Attempting to acquire leader lease"


class Manager:
    """One replica, authenticated with the admin kubeconfig (as ``pod_name``;
    its stderr goes to ``log``)."""

    def __init__(
        self,
        plane: ControlPlane,
        namespace: str,
        pod_name: str,
        *,
        log: Path | None = None,
        **flags: Unpack[ManagerFlags],
    ) -> None:
        self.argv = manager_command(plane, namespace, **flags)
        self.env = {**os.environ, "KUBECONFIG": str(plane.admin_kubeconfig), "POD_NAME": pod_name}
        self.log = log
        self.events: dict[str, float] = {}
        self.identity = ""
        self._changed = threading.Condition()
        self.proc: subprocess.Popen[str] | None = None

    def start(self) -> Manager:
        stderr = self.log.open("a") if self.log else subprocess.DEVNULL
        from ._controlplane import DIE_WITH_PARENT

        self.proc = subprocess.Popen(
            [*DIE_WITH_PARENT, *self.argv],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            env=self.env,
        )
        threading.Thread(target=self._read, daemon=True, name="crmanager-stdout").start()
        self.wait_for("started", 30)
        return self

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            with self._changed:
                self.events.setdefault(event["event"], event["unix_nano"] / 1e9)
                self.identity = self.identity or event.get("identity", "")
                self._changed.notify_all()
        with self._changed:
            self.events.setdefault("exited", time.time())
            self._changed.notify_all()

    def wait_for(self, event: str, timeout: float) -> float:
        """When ``event`` happened (time.time()); AssertionError after ``timeout``."""
        with self._changed:
            if not self._changed.wait_for(lambda: event in self.events or "exited" in self.events, timeout):
                raise AssertionError(f"crmanager: no {event!r} within {timeout} s (events: {self.events})")
            if event not in self.events:
                raise AssertionError(f"crmanager exited before {event!r} (events: {self.events})")
            return self.events[event]

    def wait_leading(self, timeout: float = 30) -> float:
        return self.wait_for("leading", timeout)

    def wait_trying(self, timeout: float = 30) -> None:
        """Until the manager has started trying for its Lease (its first
        attempt follows at once, then one every retry period): from then on
        a standby that took a held Lease would show.  Needs ``log``."""
        assert self.log is not None, "wait_trying reads the manager's log: start it with log=PATH"
        end = time.monotonic() + timeout
        while _ATTEMPTING not in (self.log.read_text(errors="replace") if self.log.exists() else ""):
            if time.monotonic() > end:
                raise AssertionError(f"the manager never tried for its Lease within {timeout} s ({self.log})")
            time.sleep(0.02)

    @property
    def leading(self) -> bool:
        return "leading" in self.events

    def stop(self, timeout: float = 20) -> None:
        """SIGTERM and wait; SIGKILL after ``timeout``."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
