"""The address guard: only public addresses, unless the settings allow more."""

import ipaddress

import pytest

from core.callbacks.addresses import CallbackRefused, address_problem, allowed_addresses
from core.settings import WebhookSettings


@pytest.mark.parametrize(("address", "kind"), [
    ("127.0.0.1", "loopback"),
    ("10.1.2.3", "private"),
    ("172.16.0.1", "private"),
    ("192.168.1.1", "private"),
    ("169.254.169.254", "link-local"),  # the cloud metadata service
    ("224.0.0.1", "multicast"),
    ("0.0.0.0", "unspecified"),
    ("240.0.0.1", "reserved"),
    ("100.64.0.1", "not a public"),  # carrier-grade NAT
    ("::1", "loopback"),
    ("::", "unspecified"),
    ("fe80::1", "link-local"),
    ("fc00::1", "private"),
    ("ff02::1", "multicast"),
    ("::ffff:127.0.0.1", "loopback"),  # IPv4-mapped: the kernel connects to 127.0.0.1
    ("::ffff:10.0.0.1", "private"),
])
def test_non_public_addresses_are_named_for_what_they_are(address: str, kind: str) -> None:
    problem = address_problem(ipaddress.ip_address(address))
    assert problem is not None and kind in problem


@pytest.mark.parametrize("address", ["93.184.215.14", "8.8.8.8", "2606:4700:4700::1111"])
def test_public_addresses_pass(address: str) -> None:
    assert address_problem(ipaddress.ip_address(address)) is None


def test_a_literal_loopback_host_is_refused_naming_the_settings_that_allow_it() -> None:
    with pytest.raises(CallbackRefused, match="loopback") as refused:
        allowed_addresses("127.0.0.1", 80, WebhookSettings())
    assert "FUSEFORGE_WEBHOOKS__ALLOWED_NETWORKS" in str(refused.value)


def test_a_name_resolving_to_loopback_is_refused_with_the_address_it_resolved_to() -> None:
    with pytest.raises(CallbackRefused, match=r"'localhost' resolves to (127\.0\.0\.1|::1)"):
        allowed_addresses("localhost", 80, WebhookSettings())


def test_an_allowed_network_lets_its_addresses_through() -> None:
    settings = WebhookSettings(allowed_networks=["127.0.0.0/8"])
    assert allowed_addresses("127.0.0.1", 80, settings) == ["127.0.0.1"]
    with pytest.raises(CallbackRefused, match="private"):
        allowed_addresses("10.0.0.1", 80, settings)


def test_an_allowed_network_covers_the_ipv4_mapped_form_of_its_addresses() -> None:
    settings = WebhookSettings(allowed_networks=["127.0.0.0/8"])
    assert allowed_addresses("::ffff:127.0.0.1", 80, settings) == ["::ffff:127.0.0.1"]


def test_an_allowed_host_is_exempt_whatever_it_resolves_to() -> None:
    assert allowed_addresses("10.0.0.7", 80, WebhookSettings(allowed_hosts=["10.0.0.7"])) == [
        "10.0.0.7"]


def test_a_host_that_does_not_resolve_is_refused_saying_so() -> None:
    with pytest.raises(CallbackRefused, match="does not resolve"):
        allowed_addresses("no-such-host.invalid", 80, WebhookSettings())
