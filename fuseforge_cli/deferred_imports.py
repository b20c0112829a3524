"""Import a module the first time one of its names is read, not when `import` runs.

onnx_ir imports sympy at its own import (0.25 s of the ~0.7 s a CLI command spends importing)
for symbolic-dim arithmetic that FuseForge's commands rarely do. The CLI defers it; the worker
and the API import it up front (their fork servers preload it once).
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import sys
import types

__all__ = ["defer_import"]


class _DeferredModule(types.ModuleType):
    """Stands in `sys.modules` for a module until the first attribute read, which imports the
    real module and copies its names here (modules that ran `import name` hold this object)."""

    def __getattr__(self, attribute: str) -> object:
        name = self.__name__
        if sys.modules.get(name) is self:
            del sys.modules[name]
        real = importlib.import_module(name)
        self.__dict__.update(real.__dict__)
        return getattr(real, attribute)


def defer_import(name: str) -> None:
    """Make `import name` cheap until one of `name`'s attributes is read; a no-op where it is
    already imported or (a top-level module) not installed. A submodule's package is not looked
    at, since finding the submodule would import the package."""
    if name in sys.modules:
        return
    if "." not in name and importlib.util.find_spec(name) is None:
        return
    placeholder = _DeferredModule(name)
    # The import system reads __spec__ of what sys.modules holds: it must not be a deferred read.
    placeholder.__spec__ = importlib.machinery.ModuleSpec(name, loader=None)
    sys.modules[name] = placeholder
