"""The address guard: a callback may go only to public addresses, unless the operator allows
more (server-side request forgery: a job must not make the service call its own network).

The host is resolved and every address it resolves to is checked, at submit time and again
at delivery time, where the connection is made to the very address that was checked (so a DNS
answer that changes in between gains nothing).
"""

import ipaddress
import socket
from collections.abc import Sequence

from core.settings import WebhookSettings

__all__ = ["CallbackRefused", "address_problem", "allowed_addresses"]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

_ALLOW_HINT = ("Webhooks go only to public addresses; an operator may allow this one with "
               "FUSEFORGE_WEBHOOKS__ALLOWED_HOSTS or FUSEFORGE_WEBHOOKS__ALLOWED_NETWORKS.")


class CallbackRefused(Exception):
    """The callback URL's host may not be called; the message says why and what would work."""


def address_problem(address: IPAddress) -> str | None:
    """What kind of non-public address `address` is ("a loopback address"...), or None."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped  # ::ffff:127.0.0.1 is 127.0.0.1 to the kernel
    checks = (
        ("is_unspecified", "an unspecified address"),
        ("is_loopback", "a loopback address"),
        ("is_link_local", "a link-local address"),
        ("is_multicast", "a multicast address"),
        ("is_reserved", "a reserved address"),  # before is_private, which includes 240.0.0.0/4
        ("is_private", "a private address"),
    )
    for attribute, kind in checks:
        if getattr(address, attribute):
            return kind
    if not address.is_global:  # e.g. 100.64.0.0/10 (carrier-grade NAT), documentation ranges
        return "not a public address"
    return None


def allowed_addresses(host: str, port: int, settings: WebhookSettings) -> list[str]:
    """The addresses `host` resolves to, all of them allowed; raises CallbackRefused when the
    host does not resolve or any address is not allowed (a mixed answer is refused whole, so
    which address a connection picks cannot matter)."""
    exempt = host.lower().rstrip(".") in {h.lower().rstrip(".") for h in settings.allowed_hosts}
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as err:
        raise CallbackRefused(f"host {host!r} does not resolve ({err}); check the URL") from err
    addresses = list(dict.fromkeys(str(info[4][0]) for info in infos))
    if not exempt:
        for text in addresses:
            problem = _refusal(ipaddress.ip_address(text.split("%")[0]), settings.allowed_networks)
            if problem is not None:
                shown = host if host == text else f"{host!r} resolves to {text}, which"
                raise CallbackRefused(f"host {shown} is {problem}. {_ALLOW_HINT}")
    return addresses


def _refusal(address: IPAddress,
             networks: Sequence[ipaddress.IPv4Network | ipaddress.IPv6Network]) -> str | None:
    candidates = [address]
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        candidates.append(address.ipv4_mapped)
    if any(a in n for a in candidates for n in networks if a.version == n.version):
        return None
    return address_problem(address)
