"""Which FuseForge server `fuseforge submit` and `fuseforge jobs` talk to, read from the same
settings the server starts from, and the line that says so on stderr.

The URL is --url, else FUSEFORGE_URL, else the server's own FUSEFORGE_HOST and FUSEFORGE_PORT
(core/settings.py; a server listening on every address, 0.0.0.0 or ::, is reached on
127.0.0.1), so `FUSEFORGE_PORT=8010 fuseforge run` in one shell and `FUSEFORGE_PORT=8010
fuseforge submit ...` in another agree. With none of them set, the one `fuseforge run` that
runs on this host (it records its URL: fuseforge_cli/service_records.py), else the default
http://127.0.0.1:8000.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from core.settings import Settings

__all__ = ["local_url", "server_url"]

_EVERY_ADDRESS = ("0.0.0.0", "::", "")


def server_url(given: str | None) -> str:
    """The server's base URL, said on stderr with where it came from.

    Raises:
        InvalidSettings: a FUSEFORGE_* setting's value is refused (as the server would).
    """
    url, source = _url_and_source(given)
    print(f"FuseForge server {url} ({source})", file=sys.stderr, flush=True)
    return url


def _url_and_source(given: str | None) -> tuple[str, str]:
    if given:
        return given, "--url"
    if os.environ.get("FUSEFORGE_URL"):
        return os.environ["FUSEFORGE_URL"], "FUSEFORGE_URL"
    from core.settings import get_settings  # noqa: PLC0415 - read only when no URL is given

    settings = get_settings()
    named = [name for name in ("FUSEFORGE_HOST", "FUSEFORGE_PORT") if os.environ.get(name)]
    if not named:  # a second shell: the `fuseforge run` started elsewhere, when only one runs
        from fuseforge_cli.service_records import live_services  # noqa: PLC0415

        urls = {service.url: service for service in live_services()}
        if len(urls) == 1:
            [(url, service)] = urls.items()
            return url, (f"the FuseForge service running here, pid {service.pid}, data in "
                         f"{service.data_dir}")
    source = (" and ".join(named) if named
              else "the server's defaults: set FUSEFORGE_URL, or FUSEFORGE_HOST and "
                   "FUSEFORGE_PORT as the server has them, or --url")
    return local_url(settings), source


def local_url(settings: Settings) -> str:
    """Where a server started with `settings` is reached from this host."""
    host = "127.0.0.1" if settings.host in _EVERY_ADDRESS else settings.host
    if ":" in host:  # an IPv6 address
        host = f"[{host}]"
    return f"http://{host}:{settings.port}"
