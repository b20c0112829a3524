"""What a GPU worker (or a benchmark) asks of TensorRT, behind one small interface we own.

A `TensorRTToolkit` detects the host's GPU and TensorRT, builds an engine from an ONNX file and
opens a runner on a built engine. `TENSORRT` does that with TensorRT itself (this package).
`load_toolkit("module:attribute")` names another implementation: the test suite's
`FakeTensorRT` (tests/support/fake_tensorrt.py), which stands in for TensorRT and a GPU on
machines that can have neither and passes the same contract tests
(tests/optimizer/backends/tensorrt/test_toolkit_contract.py).

A toolkit is a frozen record of module-level functions, so it pickles by reference and a child
process (the worker's isolated builds) can be handed the same one by name.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, Unpack

from optimizer.backends.runner import Runner
from optimizer.backends.tensorrt.build import TrtBuildArguments, TrtEngine, build_trt_engine
from optimizer.backends.tensorrt.builder_config import TrtBuildOptions
from optimizer.backends.tensorrt.metadata import GpuIdentity
from optimizer.backends.tensorrt.runner import runner_for_trt_engine
from optimizer.capabilities import HostCapabilities, detect_capabilities
from optimizer.errors import InternalError

__all__ = ["TENSORRT", "EngineBuilder", "TensorRTToolkit", "load_toolkit"]


class EngineBuilder(Protocol):
    """The signature of `optimizer.backends.tensorrt.build_trt_engine`."""

    def __call__(self, model_path: Path, out_dir: Path, *, options: TrtBuildOptions,
                 **given: Unpack[TrtBuildArguments]) -> TrtEngine: ...


class _RunnerOpener(Protocol):
    def __call__(self, engine_dir: Path, /, *, gpu: GpuIdentity | None = None) -> Runner: ...


@dataclass(frozen=True)
class TensorRTToolkit:
    """`name` appears in logs and engine records ("tensorrt", or "fake-tensorrt" in tests)."""

    name: str
    detect_capabilities: Callable[[], HostCapabilities]
    build_engine: EngineBuilder
    # the engine in a folder (engine file + metadata.json), loaded for inference after its
    # metadata is checked against `gpu`; use it in a `with` block
    open_runner: _RunnerOpener


TENSORRT = TensorRTToolkit(
    name="tensorrt",
    detect_capabilities=detect_capabilities,
    build_engine=build_trt_engine,
    open_runner=runner_for_trt_engine,
)


def load_toolkit(spec: str | None) -> TensorRTToolkit:
    """The toolkit `spec` ("package.module:attribute") names; TensorRT itself for None.

    Raises:
        InternalError: `spec` is malformed or names nothing importable of the right type (a
            deployment error: the caller says which setting gave it).
    """
    if not spec:
        return TENSORRT
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise InternalError(
            f"TensorRT toolkit {spec!r} is not 'module:attribute'; name none to use TensorRT "
            "itself")
    try:
        toolkit = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as err:
        raise InternalError(f"TensorRT toolkit {spec!r} cannot be loaded: {err}") from err
    if not isinstance(toolkit, TensorRTToolkit):
        raise InternalError(
            f"TensorRT toolkit {spec!r} is a {type(toolkit).__name__}, not a TensorRTToolkit")
    return toolkit
