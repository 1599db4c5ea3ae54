"""``supervisor libvirt ...`` on test:///default, called in-process so that
the test's connection keeps the driver's state."""

from __future__ import annotations

import time
from typing import Any

import libvirt
import pytest
from supervisor_libvirt._metadata import NAMESPACE, ShutdownRequest

from supervisor.cli import main
from tests.libvirt import lv_testdriver as td


def request_of(dom: Any) -> ShutdownRequest:
    return ShutdownRequest.parse(dom.metadata(2, NAMESPACE, 0))


def test_request_shutdown_marks_the_domains_and_presses(testconn: Any, capsys: pytest.CaptureFixture[str]) -> None:
    td.start(testconn, "t-op")
    stubborn = td.start(testconn, "t-stubborn", stubborn=True)
    before = time.time()
    command = [
        "libvirt",
        "request-shutdown",
        "t-op",
        "t-stubborn",
        "--uri",
        td.URI,
        "--grace",
        "90s",
    ]
    assert main(command) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in lines] == ["t-op", "t-stubborn"]
    assert all("shutdown requested at " in line and "grace 90s" in line for line in lines)
    # The first request is sent at once: the obedient guest is off (and its
    # live metadata with it), the stubborn one still carries the request.
    assert td.state(testconn, "t-op") == (td.STATE_SHUTOFF, td.REASON_SHUTDOWN)
    request = request_of(stubborn)
    assert request.grace == 90.0
    assert request.requested_at is not None and before - 1 <= request.requested_at <= time.time()


def test_repeated_request_keeps_the_first_time_unless_reset(testconn: Any) -> None:
    dom = td.start(testconn, "t-op", stubborn=True)
    assert main(["libvirt", "request-shutdown", "t-op", "-c", td.URI, "--no-press"]) == 0
    first = request_of(dom).requested_at
    # requested-at has one-second resolution on the wire: a --reset must
    # come in a later second to show that it takes a new time.
    while time.time() < (first or 0) + 1:
        time.sleep(0.05)
    assert main(["libvirt", "request-shutdown", "t-op", "-c", td.URI, "--grace", "1m"]) == 0
    second = request_of(dom)
    assert second.requested_at == first
    assert second.grace == 60.0
    assert main(["libvirt", "request-shutdown", "t-op", "-c", td.URI, "--reset"]) == 0
    third = request_of(dom)
    assert third.requested_at is not None and first is not None and third.requested_at > first
    assert third.grace == 60.0


def test_requests_lists_and_cancel_removes(testconn: Any, capsys: pytest.CaptureFixture[str]) -> None:
    td.start(testconn, "t-op", stubborn=True)
    td.start(testconn, "t-other", stubborn=True)
    main(["libvirt", "request-shutdown", "t-op", "-c", td.URI, "--grace", "5m", "--no-press"])
    capsys.readouterr()
    assert main(["libvirt", "requests", "-c", td.URI]) == 0
    listing = capsys.readouterr().out
    assert "t-op\trequested at" in listing
    assert "grace 5m" in listing
    assert "t-other" not in listing
    assert main(["libvirt", "cancel-shutdown", "t-op", "-c", td.URI]) == 0
    capsys.readouterr()
    main(["libvirt", "requests", "-c", td.URI])
    assert capsys.readouterr().out == ""


def test_unknown_domain_is_one_line_and_exit_1(testconn: Any, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["libvirt", "request-shutdown", "t-nonesuch", "-c", td.URI]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("supervisor libvirt: t-nonesuch: ")
    assert "libvirt error 42" in err
    assert "\n" not in err


def test_bad_grace_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["libvirt", "request-shutdown", "x", "--grace", "soon"]) == 2
    err = capsys.readouterr().err.strip()
    assert "invalid duration 'soon'" in err
    assert "\n" not in err


def test_unreachable_uri_is_one_line(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    uri = f"qemu:///system?socket={tmp_path}/none"
    assert main(["libvirt", "requests", "-c", uri]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"supervisor libvirt: cannot connect to {uri}: ")
    assert "\n" not in err


def test_a_shut_off_domain_is_refused_and_a_request_in_its_definition_is_listed_and_removed(
    testconn: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    dom = td.start(testconn, "t-off")
    dom.destroy()
    assert main(["libvirt", "request-shutdown", "t-off", "-c", td.URI]) == 1
    assert capsys.readouterr().err.strip() == (
        "supervisor libvirt: t-off: not running: nothing to shut down, no request written"
    )
    assert _no_request(dom)
    # What something else wrote into the definition is shown, and removed.
    dom.setMetadata(2, ShutdownRequest(requested_at=time.time()).to_xml(), "supervisor", NAMESPACE, 2)
    assert main(["libvirt", "requests", "-c", td.URI]) == 0
    assert capsys.readouterr().out == (
        "t-off\tshut off; request in its persistent definition: every start carries it (cancel-shutdown removes it)\n"
    )
    assert main(["libvirt", "cancel-shutdown", "t-off", "-c", td.URI]) == 0
    assert capsys.readouterr().out == "t-off: shutdown request removed\n"
    assert _no_request(dom)


def _no_request(dom: Any) -> bool:
    try:
        dom.metadata(2, NAMESPACE, 2)
    except libvirt.libvirtError as exc:
        return bool(exc.get_error_code() == libvirt.VIR_ERR_NO_DOMAIN_METADATA)
    return False
