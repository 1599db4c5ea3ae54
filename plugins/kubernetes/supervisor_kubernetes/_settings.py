"""The plugin's section of the YAML, validated into immutable values.

Stdlib and the supervisor's public API only: this runs in ``supervisor
check`` and at start-up, long before (and whether or not) the Kubernetes
client is imported.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from supervisor import Config, Settings

__all__ = [
    "DEFAULT_SERVICE_ACCOUNT_DIR",
    "DrainSettings",
    "KubernetesSettings",
    "LeaseRef",
    "LeaseSettings",
    "PodSettings",
    "parse_settings",
]

DEFAULT_SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


@dataclass(frozen=True)
class PodSettings:
    """This pod's identity; empty values come from the downward-API env
    (POD_NAME, POD_NAMESPACE, POD_UID, POD_IP/POD_IPS) and then from the
    service-account namespace file, the hostname and a GET of the pod."""

    name: str = ""
    namespace: str = ""
    uid: str = ""
    ips: tuple[str, ...] = ()


@dataclass(frozen=True)
class DrainSettings:
    """``endpoint_drain``: wait until no EndpointSlice routes to this pod."""

    services: tuple[str, ...] = ()  # empty: every Service in the namespace
    # endpointslice.kubernetes.io/managed-by values to follow; empty: every
    # slice.  A slice mirrored from a hand-made Endpoints object is only
    # updated by whoever maintains that object, and may never let go of the pod.
    managed_by: tuple[str, ...] = ()
    timeout: float = 60.0  # the longest wait for the slices (the deadline may cut it shorter)
    propagation_delay: float = 5.0
    fallback_delay: float = 15.0
    watch_timeout: float = 60.0
    progress_interval: float = 2.0
    # When the drain ends with the pod still routed (a timeout, the last
    # serving endpoint, publishNotReadyAddresses), keep the processes serving
    # until the stops need the rest of the deadline.
    keep_serving: bool = True


@dataclass(frozen=True)
class LeaseRef:
    namespace: str  # "" means the pod's namespace
    name: str


@dataclass(frozen=True)
class LeaseSettings:
    """``lease_release``: hand over leader Leases once ``process`` has exited."""

    process: str
    leases: tuple[LeaseRef, ...] = ()
    selector: str | None = None
    selector_namespace: str = ""
    identity: str | None = None
    identity_prefix: str | None = None
    retries: int = 3

    def holds(self, holder: str, pod_name: str) -> bool:
        """Whether ``holder`` (a Lease's holderIdentity) is this pod.

        The default accepts the pod name itself and controller-runtime's
        ``<hostname>_<uuid>`` form, where the hostname is the pod name.
        """
        if not holder:
            return False
        if self.identity is not None:
            return holder == self.identity
        if self.identity_prefix is not None:
            return holder.startswith(self.identity_prefix)
        return holder == pod_name or holder.startswith(pod_name + "_")


@dataclass(frozen=True)
class KubernetesSettings:
    """Everything the plugin was configured with."""

    kubeconfig: str | None = None
    service_account_dir: str = DEFAULT_SERVICE_ACCOUNT_DIR
    pod: PodSettings = field(default_factory=PodSettings)
    deadline_margin: float = 1.0
    request_timeout: float = 5.0
    events: bool = False
    drain: DrainSettings | None = None
    lease: LeaseSettings | None = None

    def plan(self) -> dict[str, str]:
        """Where ``supervisor check`` shows this plugin: reading the pod,
        the drain and the Lease hand-over, where configured."""
        plan = {"shutdown_started": "read the pod's deadline"}
        if self.drain is not None:
            plan["pre_stop"] = "until drained: no EndpointSlice routes here"
        if self.lease is not None:
            plan[f"after_process_stop:{self.lease.process}"] = "release its Leases"
        return plan


_TOP_KEYS = (
    "kubeconfig",
    "service_account_dir",
    "pod",
    "deadline_margin",
    "request_timeout",
    "events",
    "endpoint_drain",
    "lease_release",
)


def parse_settings(settings: Settings, config: Config) -> KubernetesSettings:
    """Read the section; every problem is recorded in ``settings.problems``."""
    settings.check_keys(_TOP_KEYS)
    request_timeout = settings.duration("request_timeout", 5.0)
    if request_timeout <= 0:
        settings.error("request_timeout", "must be more than 0s")
        request_timeout = 5.0
    parsed = KubernetesSettings(
        kubeconfig=settings.string("kubeconfig") or None,
        service_account_dir=settings.string("service_account_dir", DEFAULT_SERVICE_ACCOUNT_DIR),
        pod=_pod(settings.section("pod")),
        deadline_margin=settings.duration("deadline_margin", 1.0),
        request_timeout=request_timeout,
        events=settings.boolean("events", False),
        drain=_drain(settings.section("endpoint_drain")),
        lease=_lease(settings.section("lease_release"), config),
    )
    drain_section = settings.section("endpoint_drain")
    if parsed.drain is not None and drain_section is not None:
        _warn_unfitting_delays(drain_section, parsed.drain, config.grace_period, parsed.lease is not None)
    return parsed


def _warn_unfitting_delays(section: Settings, drain: DrainSettings, grace: float, releases: bool) -> None:
    """Warn (``supervisor check`` and every start) about delays the grace
    period cannot hold: the drain would never look, or the fixed delay would
    be cut and leave the processes only the reserve to stop.

    Hooks end before the escalation by the plan's reserve (a tenth of the
    grace period, at most 1 s) and, with ``lease_release``, by the time the
    release keeps (a fifth of what is left, at most 1 s)."""
    hooks = grace - min(1.0, grace * 0.1)
    if releases:
        hooks -= min(1.0, hooks * 0.2)
    log = logging.getLogger("supervisor.plugin.kubernetes")
    for key, value, what in (
        ("propagation_delay", drain.propagation_delay, "the drain would have no time to look at the EndpointSlices"),
        ("fallback_delay", drain.fallback_delay, "the fixed wait would be cut to what is left"),
    ):
        if value >= hooks:
            log.warning(
                "%s: warning: %s %gs does not fit in grace_period %gs (hooks may use %gs of it): %s",
                section.position_of(key),
                section.name(key),
                value,
                grace,
                round(hooks, 3),
                what,
            )


def _pod(section: Settings | None) -> PodSettings:
    if section is None:
        return PodSettings()
    section.check_keys(("name", "namespace", "uid", "ip", "ips"))
    ips = [*section.string_list("ips")]
    if ip := section.string("ip"):
        ips.insert(0, ip)
    return PodSettings(
        name=section.string("name", ""),
        namespace=section.string("namespace", ""),
        uid=section.string("uid", ""),
        ips=tuple(dict.fromkeys(i for i in ips if i)),
    )


def _drain(section: Settings | None) -> DrainSettings | None:
    if section is None:
        return None
    section.check_keys(
        (
            "services",
            "managed_by",
            "timeout",
            "propagation_delay",
            "fallback_delay",
            "watch_timeout",
            "progress_interval",
            "keep_serving",
        )
    )
    watch_timeout = section.duration("watch_timeout", 60.0)
    if watch_timeout < 1:
        section.error("watch_timeout", "must be at least 1s (the API counts whole seconds)")
        watch_timeout = 60.0
    progress_interval = section.duration("progress_interval", 2.0)
    if progress_interval <= 0:
        section.error("progress_interval", "must be more than 0s")
        progress_interval = 2.0
    return DrainSettings(
        services=section.string_list("services"),
        managed_by=section.string_list("managed_by"),
        timeout=section.duration("timeout", 60.0),
        propagation_delay=section.duration("propagation_delay", 5.0),
        fallback_delay=section.duration("fallback_delay", 15.0),
        watch_timeout=watch_timeout,
        progress_interval=progress_interval,
        keep_serving=section.boolean("keep_serving", True),
    )


def _lease(section: Settings | None, config: Config) -> LeaseSettings | None:
    if section is None:
        return None
    section.check_keys(("process", "leases", "selector", "namespace", "identity", "identity_prefix", "retries"))
    process = section.string("process", required=True) or ""
    names = [p.name for p in config.processes]
    if process and names and process not in names:
        section.error("process", f"no process named {process!r} (processes: {', '.join(names)})")
    leases = []
    for item in section.sections("leases"):
        item.check_keys(("namespace", "name"))
        name = item.string("name", required=True)
        if name:
            leases.append(LeaseRef(item.string("namespace", ""), name))
    selector = section.string("selector") or None
    if "leases" in section and selector is not None:
        section.error("selector", "give either leases: or selector:, not both")
    elif not leases and selector is None and "leases" not in section:
        section.error(None, "name the Leases to release: leases: [{name: ...}] or selector: 'app=...'")
    identity = section.string("identity")
    identity_prefix = section.string("identity_prefix")
    if identity is not None and identity_prefix is not None:
        section.error("identity_prefix", "give either identity: or identity_prefix:, not both")
    if identity == "":
        section.error("identity", "must not be empty (an empty holder means the Lease is free)")
        identity = None
    if identity_prefix == "":
        section.error("identity_prefix", "must not be empty: it would match every holder")
        identity_prefix = None
    return LeaseSettings(
        process=process,
        leases=tuple(leases),
        selector=selector,
        selector_namespace=section.string("namespace", ""),
        identity=identity,
        identity_prefix=identity_prefix,
        retries=section.integer("retries", 3, minimum=0, maximum=100),
    )
