"""Load the plug-ins the settings name (`Settings.plugins`): each "module:function" registers a
backend or precision declared outside this tree (optimizer/registries: `register_backend`,
`register_precision`; the worker's strategy: `register_job_backend`).

Each process that reads job configs calls `load_plugins` once at start-up, before the first one:
the API (api/main.py), the worker (worker/celery_app.py) and every job's process
(worker/supervision/job_process.py), which is a fresh interpreter and so registers again.
"""

from __future__ import annotations

from collections.abc import Iterable

from optimizer.errors import InternalError
from optimizer.registries.backends import load_dotted

__all__ = ["load_plugins"]


def load_plugins(paths: Iterable[str]) -> None:
    """Call each plug-in's "module:function" (registering an equal spec twice does nothing).

    Raises:
        InternalError: a path names no importable module or no function in it; the message
            names the setting and the path.
    """
    for path in paths:
        try:
            register = load_dotted(path)
        except (ImportError, AttributeError, ValueError) as err:
            raise InternalError(f"FUSEFORGE_PLUGINS: cannot load {path!r} "
                                f"(\"module:function\"): {err}") from err
        register()
