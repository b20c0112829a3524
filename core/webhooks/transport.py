"""One HTTP POST to a callback URL, connected only to addresses the guard allowed.

Built on httpcore (httpx's transport layer) with a network backend that resolves and checks the
host itself and then connects to the checked address: no second lookup a changed DNS answer
could slip through. TLS still verifies the certificate against the URL's host name. Redirects
are never followed (httpcore does not), and no proxy from the environment is used.
"""

import ssl
from dataclasses import dataclass
from typing import Any

import httpcore

from core.callbacks.addresses import CallbackRefused, allowed_addresses
from core.settings import WebhookSettings

__all__ = ["Answer", "post"]


@dataclass(frozen=True)
class Answer:
    """What came back: the status and Location header, or the error that stopped the request."""

    status_code: int | None = None
    location: str | None = None
    error: str | None = None
    refused: bool = False  # the address guard refused the host: trying again will not help


class _GuardedBackend(httpcore.SyncBackend):
    def __init__(self, settings: WebhookSettings) -> None:
        self._settings = settings

    def connect_tcp(self, host: str, port: int, timeout: float | None = None,
                    local_address: str | None = None, socket_options: Any = None
                    ) -> httpcore.NetworkStream:
        addresses = allowed_addresses(host, port, self._settings)
        last: Exception | None = None
        for address in addresses:
            try:
                return super().connect_tcp(address, port, timeout, local_address, socket_options)
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as err:
                last = err
        raise last or httpcore.ConnectError(f"{host} resolved to no address")


def post(url: str, body: bytes, headers: dict[str, str], settings: WebhookSettings) -> Answer:
    """POST `body` to `url` once, within `settings.timeout_s` per phase (connect, write, read)."""
    timeout = settings.timeout_s
    with httpcore.ConnectionPool(ssl_context=ssl.create_default_context(), retries=0,
                                 network_backend=_GuardedBackend(settings)) as pool:
        try:
            response = pool.request(
                "POST", url, headers=[*headers.items(), ("Content-Type", "application/json")],
                content=body,
                extensions={"timeout": {"connect": timeout, "read": timeout, "write": timeout,
                                        "pool": timeout}})
        except CallbackRefused as err:
            return Answer(error=f"refused: {err}", refused=True)
        except httpcore.TimeoutException as err:
            return Answer(error=f"timed out after {timeout:g} s ({type(err).__name__})")
        except (httpcore.NetworkError, httpcore.ProtocolError, httpcore.UnsupportedProtocol,
                ssl.SSLError, OSError) as err:
            return Answer(error=f"{type(err).__name__}: {err}")
    location = next((value.decode("latin-1") for name, value in response.headers
                     if name.lower() == b"location"), None)
    return Answer(status_code=response.status, location=location)
