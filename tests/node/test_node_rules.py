"""kube-proxy's rules as ``iptables-save -t nat`` prints them (kube-proxy-nat.txt, captured from
kube-proxy v1.35.4 in iptables mode on the test node, namespace renamed), and
what ``routed_ips`` reads from them."""

from __future__ import annotations

from pathlib import Path

from tests.node import routed_ips

TWO_ENDPOINTS = (Path(__file__).parent / "kube-proxy-nat.txt").read_text()


def test_both_endpoints_of_the_service_are_routed() -> None:
    assert routed_ips(TWO_ENDPOINTS, "shop/web") == {"10.204.167.2", "10.204.167.3"}


def test_another_service_or_namespace_routes_nowhere() -> None:
    assert routed_ips(TWO_ENDPOINTS, "shop/other") == frozenset()
    assert routed_ips(TWO_ENDPOINTS, "other/web") == frozenset()


def test_an_endpoint_chain_no_service_chain_jumps_to_is_not_routed() -> None:
    # kube-proxy drops an endpoint from the Service's chain first and deletes
    # its KUBE-SEP chain later: only the jump counts.
    jump = next(line for line in TWO_ENDPOINTS.splitlines() if "-> 10.204.167.3:8080" in line)
    assert routed_ips(TWO_ENDPOINTS.replace(jump + "\n", ""), "shop/web") == {"10.204.167.2"}
