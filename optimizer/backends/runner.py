"""The interface every backend's runner offers, down to the recipe that recreates one elsewhere.

Validation and benchmarking accept any two `Runner`s. A runner's `RunnerSpec` is picklable and
JSON-able, and `runner_from_spec` builds the runner it describes, e.g. in a child process that
measures memory (memory_probe.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Protocol, Self, runtime_checkable

import numpy as np

from optimizer.errors import InternalError
from optimizer.model.tensor_specs import TensorSpec
from optimizer.registries.backends import BACKENDS, Backend, load_dotted

__all__ = [
    "ClosesOnExit",
    "DeviceTimedRunner",
    "LoadedIO",
    "Runner",
    "RunnerSpec",
    "runner_class",
    "runner_from_spec",
]


@dataclass(frozen=True)
class RunnerSpec:
    """A picklable, JSON-able recipe from which another process can recreate a runner.

    `options` holds only JSON values (str, int, float, bool, None, lists, dicts); rebuild a
    runner with `runner_from_spec`.
    """

    backend: str  # e.g. "onnxruntime"
    model_path: str  # absolute, so the recipe works from any working directory
    options: dict[str, Any] = field(default_factory=dict)
    # "package.module:Class" of a runner outside optimizer/ (e.g. the test suite's
    # FakeTensorRT); None: the backend's own runner
    runner: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"backend": self.backend, "model_path": self.model_path,
                "options": dict(self.options), "runner": self.runner}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RunnerSpec:
        return cls(backend=data["backend"], model_path=data["model_path"],
                   options=dict(data.get("options", {})), runner=data.get("runner"))


@runtime_checkable
class Runner(Protocol):
    """A loaded model that maps input arrays to output arrays.

    Use it as a context manager so the backend's memory is released when done:

    >>> with OnnxRuntimeRunner(path) as runner:            # doctest: +SKIP
    ...     outputs = runner.infer({"input": batch})
    """

    @property
    def inputs(self) -> tuple[TensorSpec, ...]:
        """The inputs `infer` expects, with the shapes the loaded model declares."""
        ...

    @property
    def output_names(self) -> tuple[str, ...]:
        """The keys of the dict `infer` returns, in the model's order."""
        ...

    def infer(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run the model once; returns output name -> array."""
        ...

    def spec(self) -> RunnerSpec:
        """How to recreate this runner in another process."""
        ...

    def __enter__(self) -> Self: ...

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None: ...


@runtime_checkable
class DeviceTimedRunner(Runner, Protocol):
    """A runner on an accelerator that times the device itself and knows its device memory.

    Benchmarks time such runners with `time_inference` (e.g. CUDA events around the engine
    alone, inputs already copied) instead of the host clock around `infer`.
    """

    @property
    def timing_clock(self) -> str:
        """What `time_inference` measures with, e.g. "cuda_events"."""
        ...

    @property
    def device_bytes_in_use(self) -> int:
        """Device memory this runner holds now: weights, activations, I/O buffers."""
        ...

    def time_inference(self, feeds: Mapping[str, np.ndarray], *, warmup: int = 10,
                       iterations: int = 100) -> tuple[float, ...]:
        """Device milliseconds of each of `iterations` runs after `warmup` untimed ones."""
        ...


class ClosesOnExit:
    """`with runner:` releases the runner's backend memory through its `close()`."""

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()


class LoadedIO:
    """`inputs` and `output_names` as a runner read them from the model it loaded: its
    __init__ sets `_inputs` and `_output_names`."""

    _inputs: tuple[TensorSpec, ...]
    _output_names: tuple[str, ...]

    @property
    def inputs(self) -> tuple[TensorSpec, ...]:
        return self._inputs

    @property
    def output_names(self) -> tuple[str, ...]:
        return self._output_names

    def _check_feed_names(self, feeds: Mapping[str, np.ndarray], model_name: str) -> None:
        """Raise InternalError unless `feeds` names exactly the model's inputs (the stages
        build feeds from `inputs`, so a mismatch is FuseForge's bug, never the user's)."""
        expected = {spec.name for spec in self._inputs}
        if set(feeds) != expected:
            raise InternalError(
                f"Feeds for model {model_name!r} name {sorted(feeds)}, but its inputs "
                f"are {sorted(expected)}.")


def runner_class(spec: RunnerSpec) -> Any:
    """The runner class `spec` names (its `runner`, else its backend's), importing its module.

    Raises:
        InternalError: the backend is unknown.
    """
    if spec.runner is not None:  # "package.module:Class": a runner outside this package
        return load_dotted(spec.runner)
    try:
        backend = BACKENDS[Backend(spec.backend)]
    except ValueError:
        raise InternalError(
            f"RunnerSpec names backend {spec.backend!r}, which this worker cannot run; known "
            f"backends: {', '.join(map(repr, map(str, BACKENDS)))}.") from None
    # The backend's module loads on first use, so a process that only runs one backend never
    # imports the others (the web image has no TensorRT).
    return load_dotted(backend.runner)


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
