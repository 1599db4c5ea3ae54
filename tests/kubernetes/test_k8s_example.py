"""examples/kubernetes/: valid for a recent Kubernetes, least privilege, and
a supervisor configuration that the supervisor and the plugin accept."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "kubernetes"
KUBERNETES_VERSION = kubernetes_validate.latest_version()  # 1.37 with the pinned package


def _documents() -> list[tuple[str, dict[str, Any]]]:
    documents = []
    for path in sorted(EXAMPLE.glob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        for document in yaml.safe_load_all(path.read_text()):
            if document:
                documents.append((path.name, document))
    return documents


def _by_kind(kind: str) -> list[dict[str, Any]]:
    return [d for _, d in _documents() if d["kind"] == kind]


@pytest.mark.parametrize(("name", "document"), _documents(), ids=lambda v: v if isinstance(v, str) else v["kind"])
def test_manifest_is_valid(name: str, document: dict[str, Any]) -> None:
    kubernetes_validate.validate(document, KUBERNETES_VERSION, strict=True)


def test_kustomization_lists_every_manifest() -> None:
    listed = yaml.safe_load((EXAMPLE / "kustomization.yaml").read_text())["resources"]
    assert sorted(listed) == sorted(p.name for p in EXAMPLE.glob("*.yaml") if p.name != "kustomization.yaml")


def test_role_grants_exactly_what_the_plugin_needs() -> None:
    (role,) = _by_kind("Role")
    grants = {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    assert grants == {
        ("", "pods", "get"),
        ("discovery.k8s.io", "endpointslices", "list"),
        ("discovery.k8s.io", "endpointslices", "watch"),
        ("coordination.k8s.io", "leases", "get"),
        ("coordination.k8s.io", "leases", "update"),
        ("events.k8s.io", "events", "create"),
    }
    lease_rule = next(r for r in role["rules"] if "leases" in r["resources"])
    assert lease_rule.get("resourceNames") == ["example-controller-leader"]
    assert not _by_kind("ClusterRole"), "cluster-wide rights are more than the plugin needs"
    (binding,) = _by_kind("RoleBinding")
    (account,) = _by_kind("ServiceAccount")
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": role["metadata"]["name"],
    }
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account["metadata"]["name"]}]


def test_deployment_runs_the_supervisor_with_the_downward_api() -> None:
    (deployment,) = _by_kind("Deployment")
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["command"][0].endswith("/supervisor")
    fields = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in container["env"]}
    assert fields == {
        "POD_NAME": "metadata.name",
        "POD_NAMESPACE": "metadata.namespace",
        "POD_UID": "metadata.uid",
        "POD_IP": "status.podIP",
    }
    assert pod["serviceAccountName"] == _by_kind("ServiceAccount")[0]["metadata"]["name"]
    assert "lifecycle" not in container, "no preStop sleep: the plugin watches instead"
    (config_map,) = _by_kind("ConfigMap")
    config = yaml.safe_load(config_map["data"]["supervisor.yaml"])
    grace = pod["terminationGracePeriodSeconds"]
    assert float(config["grace_period"].rstrip("s")) < grace
    drain = config["plugins"]["kubernetes"]["endpoint_drain"]
    (service,) = _by_kind("Service")
    assert drain["services"] == [service["metadata"]["name"]]
    lease = config["plugins"]["kubernetes"]["lease_release"]
    assert lease["leases"] == [{"name": "example-controller-leader"}]


def test_supervisor_accepts_the_configuration(tmp_path: Path) -> None:
    (config_map,) = _by_kind("ConfigMap")
    path = tmp_path / "supervisor.yaml"
    path.write_text(config_map["data"]["supervisor.yaml"])
    result = subprocess.run(
        [str(Path(sys.executable).parent / "supervisor"), "check", "-c", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={"POD_NAME": "example-controller-7d9c-abcde", "PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 0, result.stdout + result.stderr
