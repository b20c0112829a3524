"""The checks a callback URL passes before FuseForge stores it (a job's own, a project's
default): its form (urls.py), then its host's addresses (addresses.py). A URL the worker would
refuse to call is refused when it is given, saying why; the worker checks the host again on
every attempt, since a DNS answer or the allowed networks may change meanwhile."""

from urllib.parse import urlsplit

from core.callbacks.addresses import CallbackRefused, allowed_addresses
from core.callbacks.urls import callback_url_problem
from core.settings import WebhookSettings

__all__ = ["callback_host_problem", "callback_url_refusal"]


def callback_host_problem(url: str, settings: WebhookSettings) -> str | None:
    """Why `url`'s host may not be called (it does not resolve, or resolves to an address that
    is not public and not allowed), or None. `url` is expected to pass callback_url_problem."""
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        allowed_addresses(parts.hostname or "", port, settings)
    except CallbackRefused as err:
        return str(err)
    return None


def callback_url_refusal(url: str, settings: WebhookSettings) -> str | None:
    """The first reason `url` cannot be a callback URL, its form before its host; None when it
    can.

    >>> callback_url_refusal("http://127.0.0.1/hook", WebhookSettings())
    'host 127.0.0.1 is a loopback address. Webhooks go only to public addresses; ...'
    """
    return callback_url_problem(url) or callback_host_problem(url, settings)
