"""Which shutdown request follows a refused one."""

from __future__ import annotations

import pytest
from supervisor_libvirt._binding import (
    AGENT_UNRESPONSIVE,
    ARGUMENT_UNSUPPORTED,
    INVALID_ARG,
    NO_DOMAIN,
    OPERATION_TIMEOUT,
)
from supervisor_libvirt._domains import describe_flags, fallback_flags, shutdown_flags

ACPI, AGENT = 1, 2


@pytest.mark.parametrize(
    ("flags", "code", "expected"),
    [
        (ACPI | AGENT, AGENT_UNRESPONSIVE, ACPI),  # no qemu-ga: the button still works
        (ACPI | AGENT, OPERATION_TIMEOUT, ACPI),  # the agent job held the domain
        (ACPI, INVALID_ARG, 0),  # test driver: unsupported flags
        (ACPI, ARGUMENT_UNSUPPORTED, 0),
        (0, INVALID_ARG, None),  # nothing left to fall back to
        (ACPI, NO_DOMAIN, None),  # gone: retrying won't help
        (ACPI, AGENT_UNRESPONSIVE, None),  # no agent was asked for
    ],
)
def test_fallback(flags: int, code: int, expected: int | None) -> None:
    assert fallback_flags(flags, code) == expected


def test_agent_only_by_opt_in() -> None:
    assert shutdown_flags(agent=False) == ACPI
    assert shutdown_flags(agent=True) == ACPI | AGENT
    assert describe_flags(ACPI | AGENT) == "guest agent or ACPI power button"
    assert describe_flags(0) == "driver default"
