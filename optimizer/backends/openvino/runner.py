"""Run a model with OpenVINO's CPU plugin behind the `Runner` interface.

`OpenVinoRunner` compiles an IR (engine.xml + engine.bin) or an ONNX file for "CPU" with the
inference precision it is given. The precision is always set: OpenVINO's CPU plugin otherwise
picks bf16 on a CPU with AVX512_BF16 or AMX, so an fp32 job would silently compute in bf16.
Latency is the performance hint (one request at a time, all of its threads on it), and the
thread count, where given, is the job's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov

from optimizer.backends.runner import ClosesOnExit, LoadedIO, RunnerSpec
from optimizer.errors import EngineBuildError, InferenceError, InternalError
from optimizer.model.tensor_specs import Dim, TensorSpec
from optimizer.registries.backends import Backend
from optimizer.registries.precisions import Precision

__all__ = [
    "BACKEND",
    "DEVICE",
    "INFERENCE_PRECISIONS",
    "OpenVinoRunner",
    "compile_options",
    "inference_precision_of",
]

BACKEND = Backend.OPENVINO
DEVICE = "CPU"
# OpenVINO's INFERENCE_PRECISION_HINT of each precision a job on it may ask for. int8's is f32:
# its Q/DQ layers run in u8/i8 whatever the hint, and the float remainder in f32, as the
# quantization search judged it (bf16 would add its own error to int8's).
INFERENCE_PRECISIONS: Mapping[Precision, str] = {Precision.FP32: "f32", Precision.BF16: "bf16",
                                                 Precision.INT8: "f32"}


def inference_precision_of(precision: Precision) -> str:
    """OpenVINO's inference precision hint for a job's precision ("f32", "bf16").

    Raises:
        InternalError: OpenVINO's runner has no hint for `precision` (job validation refuses
            such jobs before they reach a worker).
    """
    try:
        return INFERENCE_PRECISIONS[precision]
    except KeyError:
        raise InternalError(
            f"OpenVINO's runner has no inference precision for {precision!r}; it runs "
            f"{', '.join(map(str, INFERENCE_PRECISIONS))}.") from None


def compile_options(inference_precision: str, threads: int | None, *,
                    profiling: bool = False) -> dict[str, Any]:
    """The CPU plugin's compile properties: the precision always, the threads where given.

    Raises:
        InternalError: `inference_precision` is not one OpenVINO's runner uses, or `threads`
            is below 1 (callers validate user input before this).
    """
    if inference_precision not in INFERENCE_PRECISIONS.values():
        raise InternalError(f"Unknown OpenVINO inference precision {inference_precision!r}; "
                            f"expected one of {', '.join(INFERENCE_PRECISIONS.values())}.")
    options: dict[str, Any] = {"INFERENCE_PRECISION_HINT": inference_precision,
                               "PERFORMANCE_HINT": "LATENCY"}
    if threads is not None:
        if threads < 1:
            raise InternalError(f"threads must be >= 1 or None, got {threads}.")
        options["INFERENCE_NUM_THREADS"] = threads
    if profiling:
        options["PERF_COUNT"] = True  # per-layer counters: a little slower, for profiles only
    return options


class OpenVinoRunner(ClosesOnExit, LoadedIO):
    """An OpenVINO CPU compiled model for one model file (IR .xml or .onnx), compiled on
    construction.

    >>> with OpenVinoRunner("engine.xml", inference_precision="f32") as runner:  # doctest: +SKIP
    ...     logits = runner.infer({"input": batch})["logits"]

    Raises (on construction):
        EngineBuildError: OpenVINO cannot read or compile the model (its message is included).
    """

    def __init__(self, model_path: Path | str, *, inference_precision: str = "f32",
                 threads: int | None = None, profiling: bool = False,
                 input_shapes: Mapping[str, Sequence[int]] | None = None) -> None:
        self.model_path = Path(model_path).resolve()
        self.inference_precision = inference_precision
        self.threads = threads
        self.profiling = profiling
        # Each named input reshaped to this before compiling (a benchmark sweep's batch sizes);
        # None: the shapes the model declares.
        self.input_shapes = ({name: [int(d) for d in shape] for name, shape in input_shapes.items()}
                             if input_shapes else None)
        options = compile_options(inference_precision, threads, profiling=profiling)
        core = ov.Core()
        try:
            model = core.read_model(str(self.model_path))
            if self.input_shapes:
                model.reshape({name: ov.PartialShape(shape)
                               for name, shape in self.input_shapes.items()})
            compiled = core.compile_model(model, DEVICE, options)
        # OpenVINO's errors are RuntimeError subclasses and its frontends' own types.
        except Exception as err:
            raise EngineBuildError(
                f"OpenVINO could not compile model {self.model_path.name!r} for {DEVICE} at "
                f"inference precision {inference_precision!r}"
                f"{'' if not self.input_shapes else f' at input shapes {self.input_shapes}'}: "
                f"{err}") from err
        # OpenVINO falls back to f32 silently where the CPU lacks a lower precision's
        # instructions: an engine called bf16 must compute in bf16, or not exist.
        compiled_at = compiled.get_property("INFERENCE_PRECISION_HINT").get_type_name()
        if compiled_at != inference_precision:
            raise EngineBuildError(
                f"OpenVINO compiled model {self.model_path.name!r} at inference precision "
                f"{compiled_at!r}, not the {inference_precision!r} asked for: this CPU has no "
                f"{inference_precision} instructions (its optimization capabilities: "
                f"{', '.join(core.get_property(DEVICE, 'OPTIMIZATION_CAPABILITIES'))}).")
        self._compiled: ov.CompiledModel | None = compiled
        self._request: ov.InferRequest | None = compiled.create_infer_request()
        self._inputs = tuple(_tensor_spec(port) for port in compiled.inputs)
        self._output_names = tuple(port.get_any_name() for port in compiled.outputs)

    @property
    def compiled(self) -> ov.CompiledModel:
        """The compiled model (its runtime graph says what each layer runs at)."""
        if self._compiled is None:
            raise InternalError(f"Runner for {self.model_path.name!r} was used after close().")
        return self._compiled

    @property
    def request(self) -> ov.InferRequest:
        """The runner's one infer request (its profiling info, with `profiling`)."""
        if self._request is None:
            raise InternalError(f"Runner for {self.model_path.name!r} was used after close().")
        return self._request

    def infer(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run once; returns output name -> array (copies: the request reuses its buffers).

        Raises:
            InternalError: `feeds` does not name exactly the model's inputs, or the runner is
                closed.
            InferenceError: OpenVINO fails while running (its message is included).
        """
        request = self.request
        self._check_feed_names(feeds, self.model_path.name)
        try:
            results = request.infer({name: np.ascontiguousarray(value)
                                     for name, value in feeds.items()})
        except Exception as err:
            shapes = ", ".join(f"{name}={list(np.shape(value))}" for name, value in feeds.items())
            raise InferenceError(
                f"OpenVINO failed to run model {self.model_path.name!r} on inputs "
                f"{shapes}: {err}") from err
        return {name: np.array(results[port], copy=True)
                for name, port in zip(self._output_names, self.compiled.outputs, strict=True)}

    def spec(self) -> RunnerSpec:
        return RunnerSpec(backend=BACKEND, model_path=str(self.model_path),
                          options={"inference_precision": self.inference_precision,
                                   "threads": self.threads, "profiling": self.profiling,
                                   "input_shapes": self.input_shapes})

    def close(self) -> None:
        """Release the compiled model; `infer` raises afterwards. Safe to call twice."""
        self._request = None
        self._compiled = None


def _tensor_spec(port: ov.Output) -> TensorSpec:
    dtype = np.dtype(port.get_element_type().to_dtype()).name
    shape = port.get_partial_shape()
    dims: tuple[Dim, ...] = () if shape.rank.is_dynamic else tuple(
        dim.get_length() if dim.is_static else None for dim in shape)
    return TensorSpec(name=port.get_any_name(), dtype=dtype, shape=dims)
