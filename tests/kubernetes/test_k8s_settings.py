"""The plugin's settings, and the rules that need no API server."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from supervisor_kubernetes import KubernetesPlugin, KubernetesSettings
from supervisor_kubernetes._drain import SliceTracker, endpoint_routes, slice_selector
from supervisor_kubernetes._identity import PodIdentity, identity_from_environment
from supervisor_kubernetes._lease import released
from supervisor_kubernetes._settings import LeaseSettings, PodSettings

from supervisor import Deadline
from tests.plugins._helpers import configure, configure_problems

PROCESSES = """
processes:
  - name: controller
    command: ['true']
    main: true
"""


def _yaml(section: str) -> str:
    body = "\n".join("    " + line for line in section.strip("\n").splitlines())
    return f"{PROCESSES}plugins:\n  kubernetes:\n{body}\n"


def test_full_settings(tmp_path: Path) -> None:
    parsed, _ = configure(
        KubernetesPlugin(),  # type: ignore[arg-type]
        tmp_path,
        _yaml(
            """
kubeconfig: /etc/kube/config
deadline_margin: 2s
events: true
pod: {name: web-0, namespace: prod, uid: abc, ip: 10.0.0.7}
endpoint_drain:
  services: [web, admin]
  propagation_delay: 3s
  fallback_delay: 20s
  timeout: 45s
lease_release:
  process: controller
  leases: [{name: leader}, {namespace: kube-system, name: other}]
  identity_prefix: web-0_
  retries: 5
"""
        ),
        "kubernetes",
    )
    assert isinstance(parsed, KubernetesSettings)
    assert parsed.kubeconfig == "/etc/kube/config"
    assert parsed.deadline_margin == 2.0
    assert parsed.events
    assert parsed.pod == PodSettings("web-0", "prod", "abc", ("10.0.0.7",))
    assert parsed.drain is not None
    assert parsed.drain.services == ("web", "admin")
    assert (parsed.drain.propagation_delay, parsed.drain.fallback_delay, parsed.drain.timeout) == (
        3,
        20,
        45,
    )
    assert parsed.lease is not None
    assert [(r.namespace, r.name) for r in parsed.lease.leases] == [
        ("", "leader"),
        ("kube-system", "other"),
    ]
    assert parsed.lease.retries == 5


def test_defaults_do_nothing_but_read_the_pod(tmp_path: Path) -> None:
    parsed, _ = configure(KubernetesPlugin(), tmp_path, _yaml("{}"), "kubernetes")  # type: ignore[arg-type]
    assert isinstance(parsed, KubernetesSettings)
    assert parsed.drain is None and parsed.lease is None and not parsed.events


@pytest.mark.parametrize(
    ("section", "expected"),
    [
        (
            "endpoint_drain: {propagation_dely: 5s}",
            "cfg.yaml:8:22: unknown key 'propagation_dely' in plugins.kubernetes.endpoint_drain "
            "(did you mean 'propagation_delay'?)",
        ),
        (
            "endpoint_drain: {fallback_delay: soon}",
            "cfg.yaml:8:38: plugins.kubernetes.endpoint_drain.fallback_delay: invalid duration 'soon'",
        ),
        (
            "lease_release: {process: manager, leases: [{name: x}]}",
            "cfg.yaml:8:30: plugins.kubernetes.lease_release.process: no process named 'manager' "
            "(processes: controller)",
        ),
        (
            "lease_release: {process: controller}",
            "cfg.yaml:8:20: plugins.kubernetes.lease_release: name the Leases to release",
        ),
        (
            "lease_release: {process: controller, leases: [{name: x}], identity: a, identity_prefix: b}",
            "plugins.kubernetes.lease_release.identity_prefix: give either identity: or identity_prefix:",
        ),
        (
            "lease_release: {process: controller, leases: [{name: x}], selector: 'a=b'}",
            "plugins.kubernetes.lease_release.selector: give either leases: or selector:, not both",
        ),
        (
            "lease_release: {process: controller, leases: [{namespace: x}]}",
            "plugins.kubernetes.lease_release.leases[0]: missing required key 'name'",
        ),
        ("events: maybe", "plugins.kubernetes.events: expected true or false"),
    ],
)
def test_problems_point_at_the_line(tmp_path: Path, section: str, expected: str) -> None:
    problems = configure_problems(KubernetesPlugin(), tmp_path, _yaml(section), "kubernetes")  # type: ignore[arg-type]
    assert any(expected in p for p in problems), problems
    assert all(p.startswith(f"{tmp_path / 'cfg.yaml'}:") for p in problems), problems


def _check(path: Path) -> subprocess.CompletedProcess[str]:
    """``supervisor check -c PATH`` through the real CLI."""
    return subprocess.run(
        [str(Path(sys.executable).parent / "supervisor"), "check", "-c", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_bad_settings_exit_2_with_one_line_each(tmp_path: Path) -> None:
    """Through the real CLI: no traceback, FILE:LINE:COLUMN, exit 2."""
    path = tmp_path / "cfg.yaml"
    path.write_text(_yaml("endpoint_drain: {propagation_dely: 5s}\nlease_release: {process: nope}"))
    result = _check(path)
    assert result.returncode == 2, result
    lines = result.stderr.strip().splitlines()
    assert "Traceback" not in result.stderr
    assert any("propagation_dely" in line and line.startswith(f"{path}:8:") for line in lines), lines
    assert any("no process named 'nope'" in line for line in lines), lines


@pytest.mark.parametrize(
    ("grace", "drain", "warned"),
    [
        ("2s", "{propagation_delay: 2s, fallback_delay: 1s}", ["propagation_delay 2s does not fit in grace_period 2s"]),
        ("10s", "{fallback_delay: 15s}", ["fallback_delay 15s does not fit in grace_period 10s"]),
        ("30s", "{propagation_delay: 5s, fallback_delay: 15s}", []),
    ],
)
def test_check_warns_about_delays_the_grace_period_cannot_hold(
    tmp_path: Path, grace: str, drain: str, warned: list[str]
) -> None:
    """``supervisor check``: a warning at the delay's line, and still exit 0."""
    path = tmp_path / "cfg.yaml"
    path.write_text(f"grace_period: {grace}\n" + _yaml(f"endpoint_drain: {drain}"))
    result = _check(path)
    assert result.returncode == 0, result
    warnings = [line for line in result.stderr.splitlines() if ": warning: " in line]
    assert len(warnings) == len(warned), result.stderr
    for line, text in zip(warnings, warned, strict=True):
        assert line.startswith(f"{path}:") and text in line, line


def test_endpoint_conditions() -> None:
    # nil ready means ready, nil terminating means not terminating (KEP-1672).
    assert endpoint_routes({"addresses": ["10.0.0.1"]})
    assert endpoint_routes({"conditions": {"ready": True}})
    assert not endpoint_routes({"conditions": {"ready": False}})
    assert not endpoint_routes({"conditions": {"ready": True, "terminating": True}})
    assert not endpoint_routes({"conditions": {"serving": True, "terminating": True}})


def test_slice_tracker_matches_uid_then_ip() -> None:
    me = PodIdentity("web-0", "ns", "uid-1", ("10.0.0.7",))
    tracker = SliceTracker(me)
    tracker.reset(
        [
            {
                "metadata": {"name": "a"},
                "endpoints": [{"addresses": ["10.0.0.7"], "targetRef": {"kind": "Pod", "uid": "uid-1"}}],
            },
            # Same IP, other pod (an IP reused after our pod's death): not ours.
            {
                "metadata": {"name": "b"},
                "endpoints": [{"addresses": ["10.0.0.7"], "targetRef": {"kind": "Pod", "uid": "uid-2"}}],
            },
            # No targetRef (a hand-made or mirrored slice): matched by address.
            {"metadata": {"name": "c"}, "endpoints": [{"addresses": ["10.0.0.7"]}]},
            {"metadata": {"name": "d"}, "endpoints": [{"addresses": ["10.0.0.8"]}]},
        ]
    )
    assert tracker.routing == ["a", "c"]
    tracker.update({"metadata": {"name": "a"}, "endpoints": []})  # removed from the slice
    tracker.remove({"metadata": {"name": "c"}})  # slice deleted
    assert tracker.drained


def test_identity_from_environment(tmp_path: Path) -> None:
    (tmp_path / "namespace").write_text("from-file\n")
    env = {"POD_NAME": "web-0", "POD_UID": "u", "POD_IP": "10.0.0.7", "POD_IPS": "10.0.0.7,fd00::7"}
    identity = identity_from_environment(PodSettings(), str(tmp_path), env)
    assert identity == PodIdentity("web-0", "from-file", "u", ("10.0.0.7", "fd00::7"))
    completed = PodIdentity("web-0", "ns").completed_from(
        {
            "metadata": {"uid": "x"},
            "status": {"podIP": "10.1.1.1", "podIPs": [{"ip": "10.1.1.1"}, {"ip": "fd00::1"}]},
        }
    )
    assert completed.uid == "x" and completed.ips == ("10.1.1.1", "fd00::1")


def test_release_body_is_client_gos() -> None:
    lease = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": "l", "resourceVersion": "42", "managedFields": [{}]},
        "spec": {
            "holderIdentity": "web-0_1",
            "leaseDurationSeconds": 15,
            "leaseTransitions": 4,
            "strategy": "OldestEmulationVersion",
            "preferredHolder": "x",
        },
    }
    body = released(lease)
    assert body["metadata"] == {"name": "l", "resourceVersion": "42"}
    spec = body["spec"]
    assert spec["holderIdentity"] == "" and spec["leaseDurationSeconds"] == 1
    assert spec["leaseTransitions"] == 4
    assert spec["acquireTime"] == spec["renewTime"] and spec["renewTime"].microsecond != 0
    assert "strategy" not in spec and "preferredHolder" not in spec


def test_holder_matching() -> None:
    default = LeaseSettings(process="c")
    assert default.holds("web-0_4f2a", "web-0") and default.holds("web-0", "web-0")
    assert not default.holds("web-01_4f2a", "web-0") and not default.holds("", "web-0")
    assert LeaseSettings(process="c", identity_prefix="web-0-").holds("web-0-x", "web-0")
    assert not LeaseSettings(process="c", identity="exact").holds("exact2", "web-0")


def test_slice_selector() -> None:
    assert slice_selector([]) is None
    assert slice_selector(["web", "admin"]) == "kubernetes.io/service-name in (admin,web)"
    assert slice_selector([], ["endpointslice-controller.k8s.io"]) == (
        "endpointslice.kubernetes.io/managed-by in (endpointslice-controller.k8s.io)"
    )
    assert slice_selector(["web"], ["a"]) == (
        "kubernetes.io/service-name in (web),endpointslice.kubernetes.io/managed-by in (a)"
    )


def test_the_client_is_imported_only_when_enabled() -> None:
    """Installing the plugin costs nothing to deployments that do not use it."""
    code = (
        "import sys, supervisor_kubernetes as k\n"
        "k.KubernetesPlugin()\n"
        "assert 'kubernetes' not in sys.modules, sorted(m for m in sys.modules if 'kube' in m)\n"
        "assert 'urllib3' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_note_is_cut_by_bytes_never_inside_a_character() -> None:
    from supervisor_kubernetes._events import NOTE_LIMIT, cut_utf8, event_name

    note = "é" * 600  # 1200 bytes, 600 characters
    cut = cut_utf8(note, NOTE_LIMIT)
    assert len(cut.encode()) == 1024 and cut == "é" * 512
    assert cut_utf8("ab€", 4) == "ab"  # € is 3 bytes: not split
    assert cut_utf8("short", NOTE_LIMIT) == "short"
    assert event_name("web-0", 0xABC) == "web-0.abc"
    assert len(event_name("p" * 253)) == 253


async def test_deletion_timestamps_lost_fraction_is_won_back_from_the_grace_count() -> None:
    import datetime

    from supervisor_kubernetes._pod import seconds_to_kill

    deadline = Deadline(60)
    now = datetime.datetime.now(datetime.UTC)
    # Deleted with grace 6 just now: the server decided now + 6 s and wrote
    # it truncated to the second, up to 1 s early.
    stamp = (now + datetime.timedelta(seconds=6)).replace(microsecond=0).isoformat()
    left = seconds_to_kill({"deletionTimestamp": stamp, "deletionGracePeriodSeconds": 6}, deadline)
    assert left is not None and left > 5.9, left  # the grace count, not the truncated stamp
    # A grace count beyond the stamp's second (a SIGTERM that came late): the stamp wins.
    late = seconds_to_kill({"deletionTimestamp": stamp, "deletionGracePeriodSeconds": 9}, deadline)
    # (5, 6] when read the instant it was written; less the time since.
    assert late is not None and 5.0 - 0.1 < late <= 6.0, late
