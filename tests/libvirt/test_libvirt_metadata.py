"""The shutdown request's XML, as providers and operators write it."""

from __future__ import annotations

import pytest
from supervisor_libvirt._metadata import ShutdownRequest, format_time, parse_time


def test_round_trip() -> None:
    request = ShutdownRequest(requested_at=1_796_000_000.0, grace=300.0, guest_agent=True)
    xml = request.to_xml()
    assert xml == '<shutdown requested-at="2026-11-30T00:53:20Z" grace="5m" guest-agent="yes" />'
    assert ShutdownRequest.parse(xml) == request


def test_libvirt_prefixed_element_with_offset_time() -> None:
    xml = (
        '<supervisor:shutdown xmlns:supervisor="urn:pid1-supervisor:libvirt:1" '
        'requested-at="2026-12-01T15:00:00+01:00" grace="90"/>'
    )
    request = ShutdownRequest.parse(xml)
    assert request.requested_at == parse_time("2026-12-01T14:00:00Z")
    assert request.due(default_grace=300) == request.requested_at + 90  # type: ignore[operator]
    assert request.guest_agent is False


def test_default_grace_and_no_request() -> None:
    assert ShutdownRequest.parse('<shutdown requested-at="2026-12-01T14:00:00Z"/>').due(60) == (
        parse_time("2026-12-01T14:00:00Z") + 60
    )
    assert ShutdownRequest.parse("<shutdown/>").due(60) is None


@pytest.mark.parametrize(
    ("xml", "message"),
    [
        ('<shutdown requested-at="soon"/>', "requested-at: invalid time 'soon'"),
        ('<shutdown grace="forever"/>', "grace: invalid duration 'forever'"),
        ('<shutdown guest-agent="maybe"/>', "guest-agent: expected yes or no"),
        ("<shutdown", "invalid metadata XML"),
    ],
)
def test_invalid_requests_name_the_attribute(xml: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ShutdownRequest.parse(xml)


def test_fractional_times_keep_milliseconds() -> None:
    assert format_time(1_796_000_000.25) == "2026-11-30T00:53:20.250Z"
