"""The line `fuseforge run` and `fuseforge serve` print on every start about API keys."""

from core.settings import Settings

__all__ = ["auth_notice"]


def auth_notice(settings: Settings) -> str:
    """How clients authenticate, or a warning that they need not (auth off, dev/test only)."""
    if not settings.auth.enabled:
        return (f"WARNING: API keys are OFF (FUSEFORGE_AUTH__ENABLED=false): anyone who can reach "
                f"http://{settings.host}:{settings.port} acts as the default project. Keep it on "
                "127.0.0.1, and unset the variable before exposing the service "
                "(FUSEFORGE_ENV=prod refuses to start this way).")
    return ("API keys are on: every /v1 request needs `Authorization: Bearer <key>`; make a key "
            "with `fuseforge apikey create --project default --name me` (same settings).")
