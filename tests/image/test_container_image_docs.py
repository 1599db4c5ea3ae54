"""The manifests and configuration in docs/container-image.md are valid: a
misspelled field fails here instead of in a user's deploy."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from supervisor._units import parse_duration

DOC = Path(__file__).resolve().parents[2] / "docs" / "container-image.md"
KUBERNETES_VERSION = kubernetes_validate.latest_version()


def _manifests() -> list[dict[str, Any]]:
    blocks = re.findall(r"^```yaml\n(.*?)^```", DOC.read_text(), re.MULTILINE | re.DOTALL)
    documents = [d for block in blocks for d in yaml.safe_load_all(block)]
    return [d for d in documents if isinstance(d, dict) and "apiVersion" in d]


MANIFESTS = _manifests()


def test_the_doc_has_a_deployment_and_its_configmap() -> None:
    assert sorted(m["kind"] for m in MANIFESTS) == ["ConfigMap", "Deployment"]


@pytest.mark.parametrize("manifest", MANIFESTS, ids=lambda m: f"{m['kind']}/{m['metadata']['name']}")
def test_manifest_matches_the_kubernetes_schema(manifest: dict[str, Any]) -> None:
    kubernetes_validate.validate(manifest, KUBERNETES_VERSION, strict=True)


def test_the_deployment_runs_the_images_user_and_mounts_the_configmap() -> None:
    deployment = next(m for m in MANIFESTS if m["kind"] == "Deployment")
    configmap = next(m for m in MANIFESTS if m["kind"] == "ConfigMap")
    pod = deployment["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsUser"] == 65532
    (container,) = pod["containers"]
    assert "command" not in container  # the image's ENTRYPOINT stays the supervisor
    config_path = container["args"][container["args"].index("-c") + 1]
    config_mount, run_mount = container["volumeMounts"]
    config_volume, run_volume = pod["volumes"]
    assert config_volume["configMap"]["name"] == configmap["metadata"]["name"]
    assert config_path == f"{config_mount['mountPath']}/{next(iter(configmap['data']))}"
    # A writable place for the control socket on the read-only root filesystem.
    assert container["securityContext"]["readOnlyRootFilesystem"]
    assert run_mount == {"name": run_volume["name"], "mountPath": "/run/supervisor"} and "emptyDir" in run_volume


def test_the_configmaps_supervisor_configuration_passes_check(tmp_path: Path) -> None:
    configmap = next(m for m in MANIFESTS if m["kind"] == "ConfigMap")
    ((name, text),) = configmap["data"].items()
    path = tmp_path / name
    path.write_text(text)
    result = subprocess.run(
        [str(Path(sys.executable).parent / "supervisor"), "check", "-c", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    # The supervisor escalates (and logs its timeline) before the kubelet's SIGKILL.
    deployment = next(m for m in MANIFESTS if m["kind"] == "Deployment")
    pod_grace = deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    assert parse_duration(yaml.safe_load(text)["grace_period"]) < pod_grace
