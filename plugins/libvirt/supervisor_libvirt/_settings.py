"""The plugin's section of the YAML, validated into one immutable object."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from supervisor import Config, Settings

from ._domains import Selection

__all__ = ["EnforcerSettings", "LibvirtSettings", "parse"]

Mode = Literal["shutdown", "managedsave"]
DEFAULT_URI = "qemu:///system"

_KEYS = (
    "uri",
    "process",
    "mode",
    "domains",
    "exclude",
    "marker",
    "guest_agent",
    "shutdown_timeout",
    "resend_interval",
    "destroy_reserve",
    "poll_interval",
    "max_parallel",
    "enforcer",
    "restore",
    "bypass_cache",
    "sync_time",
)
_ENFORCER_KEYS = ("enabled", "resync_interval", "grace")


@dataclass(frozen=True, slots=True)
class EnforcerSettings:
    """The deletion-deadline enforcer (a background task)."""

    enabled: bool = True
    resync_interval: float = 60.0
    grace: float = 300.0  # when a request carries no grace of its own


@dataclass(frozen=True, slots=True)
class LibvirtSettings:
    uri: str = DEFAULT_URI
    process: str | None = None  # the supervised libvirtd; None: shut down in pre_stop
    mode: Mode = "shutdown"
    selection: Selection = field(default_factory=Selection)
    guest_agent: tuple[str, ...] = ()  # fnmatch patterns of domains shut down via the agent
    shutdown_timeout: float = 60.0
    resend_interval: float = 5.0
    destroy_reserve: float = 5.0
    poll_interval: float = 1.0
    max_parallel: int = 0  # 0: every domain at once
    hook_timeout: float | None = None  # the host's per-hook limit, which also bounds us
    enforcer: EnforcerSettings = field(default_factory=EnforcerSettings)
    restore: bool = True  # start again, at start-up, the guests this plugin saved
    bypass_cache: bool = False  # save and restore without the host's page cache
    sync_time: bool = False  # set a restored guest's clock (through its guest agent)

    def plan(self) -> dict[str, str]:
        """Where ``supervisor check`` shows this plugin: the guests' shutdown
        before the supervised libvirtd stops, or beside pre_stop without one."""
        what = "save the guests" if self.mode == "managedsave" else "shut the guests down"
        if self.process is not None:
            return {f"before_process_stop:{self.process}": what}
        return {"wind_down": what}


def parse(settings: Settings, config: Config) -> LibvirtSettings:
    """Read the section; problems are recorded in ``settings`` (the host reports them)."""
    settings.check_keys(_KEYS)
    process = settings.string("process")
    if process is not None and process not in {p.name for p in config.processes}:
        known = ", ".join(p.name for p in config.processes) or "none"
        settings.error("process", f"no process named {process!r} (processes: {known})")
    mode = settings.string("mode", "shutdown", choices=("shutdown", "managedsave"))
    resend = settings.duration("resend_interval", 5.0)
    poll = settings.duration("poll_interval", 1.0)
    for key, value in (("resend_interval", resend), ("poll_interval", poll)):
        if value <= 0:
            settings.error(key, "must be more than 0")
    marker = settings.string("marker")
    if marker is not None and not marker.strip():
        settings.error("marker", "must be an XML namespace URI")
    return LibvirtSettings(
        uri=settings.string("uri", DEFAULT_URI),
        process=process,
        mode="managedsave" if mode == "managedsave" else "shutdown",
        selection=Selection(
            names=settings.string_list("domains"),
            exclude=settings.string_list("exclude"),
            marker=marker or None,
        ),
        guest_agent=settings.string_list("guest_agent"),
        shutdown_timeout=settings.duration("shutdown_timeout", 60.0),
        resend_interval=max(resend, 0.01),
        destroy_reserve=settings.duration("destroy_reserve", 5.0),
        poll_interval=max(poll, 0.01),
        max_parallel=settings.integer("max_parallel", 0, minimum=0),
        hook_timeout=settings.duration("hook_timeout"),
        enforcer=_enforcer(settings),
        restore=settings.boolean("restore", True),
        bypass_cache=settings.boolean("bypass_cache", False),
        sync_time=settings.boolean("sync_time", False),
    )


def _enforcer(settings: Settings) -> EnforcerSettings:
    if "enforcer" not in settings:
        return EnforcerSettings()
    if isinstance(settings.raw("enforcer"), bool):
        return EnforcerSettings(enabled=settings.boolean("enforcer"))
    section = settings.section("enforcer")
    if section is None:
        return EnforcerSettings()
    section.check_keys(_ENFORCER_KEYS)
    interval = section.duration("resync_interval", 60.0)
    if interval <= 0:
        section.error("resync_interval", "must be more than 0")
    return EnforcerSettings(
        enabled=section.boolean("enabled", True),
        resync_interval=max(interval, 0.01),
        grace=section.duration("grace", 300.0),
    )
