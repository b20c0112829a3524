"""Import a module the first time one of its names is read, not when `import` runs.

onnx_ir imports sympy at its own import (0.25 s of the ~0.7 s a CLI command spends importing)
for symbolic-dim arithmetic that FuseForge's commands rarely do; onnxscript's constant folder
imports onnx's reference ops (~0.05 s) for the ops it folds with them, none in most models.
The CLI defers them; the worker and the API import them up front (their fork servers preload
them once).

A deferred module is found as usual when something imports it, and bound where the import
binds it (a name, its package's attribute), but importlib's LazyLoader runs its code only on
the first attribute read: `import onnx.reference.ops` costs nothing until
`onnx.reference.ops.load_op` is called. `from sympy import Symbol` reads an attribute, so it
loads sympy there.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
from collections.abc import Sequence
from types import ModuleType

__all__ = ["defer_import"]


class _DeferringFinder(importlib.abc.MetaPathFinder):
    """Finds the deferred modules with the finders after it, and gives them a lazy loader."""

    def __init__(self) -> None:
        self.names: set[str] = set()

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname not in self.names:
            return None
        spec = _find_with_others(self, fullname, path, target)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec  # not installed (the import fails as usual), or nothing to defer
        spec.loader = importlib.util.LazyLoader(spec.loader)
        return spec


def _find_with_others(finder: _DeferringFinder, fullname: str, path: Sequence[str] | None,
                      target: ModuleType | None) -> importlib.machinery.ModuleSpec | None:
    for other in sys.meta_path:
        find_spec = getattr(other, "find_spec", None)
        if other is finder or find_spec is None:
            continue
        spec = find_spec(fullname, path, target)
        if spec is not None:
            return spec  # type: ignore[no-any-return]
    return None


_FINDER = _DeferringFinder()


def defer_import(name: str) -> None:
    """Make `import name` (a module or a package's submodule) cheap until one of `name`'s
    attributes is read; a no-op where it is already imported. Nothing is looked up now: a
    module that is not installed fails to import when something imports it, as before."""
    if name in sys.modules:
        return
    _FINDER.names.add(name)
    if _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)
