"""Recreate a runner from its `RunnerSpec`, e.g. in a child process that measures memory."""

from __future__ import annotations

import importlib
from typing import Any

from optimizer.errors import InternalError
from optimizer.runner import Runner, RunnerSpec

__all__ = ["runner_class", "runner_from_spec"]

# Backend name -> (module, class). Modules load on first use, so a process that only runs one
# backend never imports the others (the web image has no TensorRT).
_BACKENDS = {
    "onnxruntime": ("optimizer.backends.onnxruntime.runner", "OnnxRuntimeRunner"),
    "tensorrt": ("optimizer.backends.tensorrt.runner", "TensorRTRunner"),
}


def runner_class(spec: RunnerSpec) -> Any:
    """The runner class `spec` names (its `runner`, else its backend's), importing its module.

    Raises:
        InternalError: the backend is unknown.
    """
    if spec.runner is not None:  # "package.module:Class": a runner outside this package
        module_name, _, class_name = spec.runner.partition(":")
        return getattr(importlib.import_module(module_name), class_name)
    backend = spec.backend
    try:
        module_name, class_name = _BACKENDS[backend]
    except KeyError:
        raise InternalError(
            f"RunnerSpec names backend {backend!r}, which this worker cannot run; known "
            f"backends: {', '.join(map(repr, _BACKENDS))}.") from None
    return getattr(importlib.import_module(module_name), class_name)


def runner_from_spec(spec: RunnerSpec) -> Runner:
    """Build the runner `spec` describes.

    Raises:
        InternalError: the backend is unknown or the options do not fit it.
        EngineBuildError: the backend cannot load the model.
    """
    cls = runner_class(spec)
    try:
        runner: Runner = cls(spec.model_path, **spec.options)
    except TypeError as err:
        raise InternalError(
            f"RunnerSpec options {spec.options!r} do not fit backend {spec.backend!r}: {err}"
        ) from err
    return runner
