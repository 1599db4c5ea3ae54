"""The objects the real node's app scenarios apply: pods of an image of
``tests/node/app.py`` under the supervisor, as ``examples/kubernetes`` lays
them out (the supervisor's configuration in a ConfigMap mounted at
``/etc/supervisor``, the downward-API variables, ``/run/supervisor`` as a
volume) and the RBAC the kubernetes plugin's drain needs (the rules of
``examples/kubernetes/rbac.yaml`` for pods, EndpointSlices and Events)."""

from __future__ import annotations

from typing import Any

__all__ = ["APP_PORT", "config_map", "pod_spec", "service", "supervisor_access", "supervisor_yaml"]

APP_PORT = 8080
SERVICE_ACCOUNT = "app"


def supervisor_yaml(
    grace: int, *, drain_service: str | None = None, propagation_delay: float = 2.0, extra: str = ""
) -> str:
    """The supervisor's configuration: the app as its main process, and with
    ``drain_service`` the endpoint drain configured as the example does."""
    lines = [
        f"grace_period: {grace - 1}s",
        "log: {format: json, level: info}",
        *([extra] if extra else []),
        "processes:",
        "  - name: app",
        "    main: true",
        f"    command: [python3, /app/app.py, --port, '{APP_PORT}']",
        "    stop_timeout: 10s",
    ]
    if drain_service is not None:
        lines += [
            "plugins:",
            "  kubernetes:",
            "    events: true",
            "    endpoint_drain:",
            f"      services: [{drain_service}]",
            "      timeout: 20s",
            f"      propagation_delay: {propagation_delay:g}s",
            "      fallback_delay: 15s",
        ]
    return "\n".join(lines) + "\n"


def supervisor_access() -> list[dict[str, Any]]:
    """The pods' ServiceAccount and what the plugin may do with it."""
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": SERVICE_ACCOUNT}},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": "app-supervisor"},
            "rules": [
                {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]},
                {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list", "watch"]},
                {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create"]},
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "app-supervisor"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "app-supervisor"},
            "subjects": [{"kind": "ServiceAccount", "name": SERVICE_ACCOUNT}],
        },
    ]


def config_map(name: str, supervisor: str) -> dict[str, Any]:
    """The supervisor's configuration, mounted at /etc/supervisor."""
    data = {"supervisor.yaml": supervisor}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data}


def service(name: str, selector: dict[str, str]) -> dict[str, Any]:
    """A ClusterIP Service on the app's port, as port 80."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name},
        "spec": {"selector": selector, "ports": [{"name": "http", "port": 80, "targetPort": "http"}]},
    }


def pod_spec(image: str, config: str, grace: int, pre_stop: dict[str, Any] | None = None) -> dict[str, Any]:
    """A pod of ``image`` (its ENTRYPOINT the supervisor) with the ConfigMap
    ``config``; ``pre_stop`` the container's ``lifecycle.preStop``, if any."""
    container: dict[str, Any] = {
        "name": "app",
        "image": image,
        "imagePullPolicy": "Never",
        "args": ["-c", "/etc/supervisor/supervisor.yaml"],
        "env": [
            {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}
            for name, path in (
                ("POD_NAME", "metadata.name"),
                ("POD_NAMESPACE", "metadata.namespace"),
                ("POD_UID", "metadata.uid"),
                ("POD_IP", "status.podIP"),
            )
        ],
        "ports": [{"name": "http", "containerPort": APP_PORT}],
        "readinessProbe": {"httpGet": {"path": "/healthz", "port": "http"}, "periodSeconds": 1},
        # A container that fails leaves its last lines in its status.
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "volumeMounts": [
            {"name": "config", "mountPath": "/etc/supervisor", "readOnly": True},
            {"name": "run", "mountPath": "/run/supervisor"},
        ],
    }
    if pre_stop is not None:
        container["lifecycle"] = {"preStop": pre_stop}
    return {
        "serviceAccountName": SERVICE_ACCOUNT,
        "terminationGracePeriodSeconds": grace,
        "containers": [container],
        "volumes": [
            {"name": "config", "configMap": {"name": config}},
            {"name": "run", "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}},
        ],
    }
