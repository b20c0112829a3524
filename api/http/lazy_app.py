"""The `app` of an ASGI entry module ("api.main:app", "dashboard.site:app"), built on first use:
importing the module (for create_app, in tests and the CLI) builds none, and so reads no
settings and opens no database."""

from __future__ import annotations

import sys
from collections.abc import Callable

from fastapi import FastAPI

__all__ = ["app_on_first_use"]


def app_on_first_use(module: str, build: Callable[[], FastAPI]) -> Callable[[str], FastAPI]:
    """A module `__getattr__` (PEP 562) for `module` that builds `app` on its first access and
    keeps it as the module's attribute, so later reads find it without the hook."""

    def __getattr__(name: str) -> FastAPI:
        if name != "app":
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        app = build()
        vars(sys.modules[module])["app"] = app
        return app

    return __getattr__
