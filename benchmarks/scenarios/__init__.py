"""The scenarios of issue 7, in the order of its table.

Each is a function ``(bench) -> list[Row]``; a scenario that cannot run here
returns its rows marked "not measured" with the reason instead of raising.
"""

from __future__ import annotations

from collections.abc import Callable

from .._bench import Bench
from .._results import Row
from .core import escalation, exit_latency, memory, orphan_storm, signal_forwarding, startup
from .hooks import hook_concurrency
from .kube import drain_cost, endpoint_drain, lease_handover, memory_with_kubernetes
from .overrun import overrun
from .rollout import rolling_update
from .vms import enforcer_lag, vm_shutdown

__all__ = ["SCENARIOS", "Scenario"]

Scenario = Callable[[Bench], list[Row]]

SCENARIOS: dict[str, Scenario] = {
    "startup": startup,
    "signals": signal_forwarding,
    "orphans": orphan_storm,
    "exit": exit_latency,
    "memory": memory,
    "memory-kubernetes": memory_with_kubernetes,
    "hooks": hook_concurrency,
    "escalation": escalation,
    "overrun": overrun,
    "drain": endpoint_drain,
    "drain-cost": drain_cost,
    "lease": lease_handover,
    "vms": vm_shutdown,
    "vm-enforcer": enforcer_lag,
    "rollout": rolling_update,
}
