"""Run an ONNX model with ONNX Runtime on the CPU behind the `Runner` interface.

`OnnxRuntimeRunner` loads a model file as it is. `runner_for_model` runs an in-memory model,
decomposing fuseforge plugin nodes into standard ops first: it is how the CPU tools (bisection,
precision evaluation, ablation's default runner) run a graph fused for TensorRT.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal, get_args

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto

from optimizer.backends.onnxruntime.denormals import denormals_flushed, thread_float_state_kept
from optimizer.backends.onnxruntime.run_limits import RunLimit, file_has_loop
from optimizer.backends.runner import ClosesOnExit, LoadedIO, RunnerSpec
from optimizer.errors import (
    EngineBuildError,
    InferenceError,
    InferenceTimeLimitError,
    InternalError,
)
from optimizer.model.tensor_specs import TensorSpec, dtype_name
from optimizer.plugins.decompose import runnable_in_onnxruntime
from optimizer.registries.backends import Backend

__all__ = [
    "BACKEND",
    "OnnxRuntimeRunner",
    "OptimizationLevel",
    "PROVIDERS",
    "runner_for_model",
    "session_options",
]

BACKEND = Backend.ONNXRUNTIME
PROVIDERS = ("CPUExecutionProvider",)

OptimizationLevel = Literal["disabled", "basic", "extended", "all"]
_GRAPH_OPTIMIZATION_LEVELS = {
    "disabled": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
    "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
}


def session_options(level: OptimizationLevel, intra_op_threads: int | None) -> ort.SessionOptions:
    """ONNX Runtime session options for an optimization level and thread count.

    Raises:
        InternalError: `level` is not one of "disabled", "basic", "extended", "all", or
            `intra_op_threads` is below 1 (callers validate user input before this).
    """
    if level not in _GRAPH_OPTIMIZATION_LEVELS:
        raise InternalError(
            f"Unknown ONNX Runtime optimization level {level!r}; expected one of "
            f"{', '.join(get_args(OptimizationLevel))}.")
    options = ort.SessionOptions()
    options.graph_optimization_level = _GRAPH_OPTIMIZATION_LEVELS[level]
    if intra_op_threads is not None:
        if intra_op_threads < 1:
            raise InternalError(f"intra_op_threads must be >= 1 or None, got {intra_op_threads}.")
        options.intra_op_num_threads = intra_op_threads
    # FuseForge's sessions run beside others in one process (the benchmark and the int8 search
    # time several interleaved): an idle session's spinning pool threads would steal the cores
    # of the one being timed. Measured on 2 cores, ResNet-50 int8/fp32 at 2 threads: 0.46x
    # spinning, 0.34x not (one thread: 0.29x either way, it has no pool).
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return options


class OnnxRuntimeRunner(ClosesOnExit, LoadedIO):
    """An ONNX Runtime CPU session for one model file, created on construction.

    >>> with OnnxRuntimeRunner("model.onnx", optimization_level="all") as runner:  # doctest: +SKIP
    ...     logits = runner.infer({"input": batch})["logits"]

    Raises (on construction):
        EngineBuildError: ONNX Runtime cannot load the model (its message is included).
    """

    def __init__(
        self,
        model_path: Path | str,
        *,
        optimization_level: OptimizationLevel = "disabled",
        intra_op_threads: int | None = None,
        disabled_optimizers: Sequence[str] = (),
        flush_denormals: bool = False,
    ) -> None:
        self.model_path = Path(model_path).resolve()
        self.optimization_level = optimization_level
        self.intra_op_threads = intra_op_threads
        self.disabled_optimizers = tuple(disabled_optimizers)
        # Denormals read and written as zero while running (backends/onnxruntime/denormals.py).
        self.flush_denormals = flush_denormals
        options = session_options(optimization_level, intra_op_threads)
        if flush_denormals:
            options.add_session_config_entry("session.set_denormal_as_zero", "1")  # pool threads
        try:
            # The first session of a process sets the creating thread's denormal mode for good
            # (ON or OFF, as that session says): kept as it was.
            with thread_float_state_kept():
                self._session: ort.InferenceSession | None = ort.InferenceSession(
                    str(self.model_path), sess_options=options, providers=list(PROVIDERS),
                    disabled_optimizers=list(self.disabled_optimizers))
        # ONNX Runtime's errors share no base class below Exception.
        except Exception as err:
            raise EngineBuildError(
                f"ONNX Runtime could not load model {self.model_path.name!r} at optimization "
                f"level {optimization_level!r}: {err}") from err
        # A Loop may go on forever on some inputs: each run is timed and stopped (run_limits.py).
        self._run_limit = RunLimit() if file_has_loop(self.model_path) else None
        self._inputs = tuple(_tensor_spec(arg) for arg in self._session.get_inputs())
        self._output_names = tuple(arg.name for arg in self._session.get_outputs())

    def infer(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run once; returns output name -> array.

        Raises:
            InternalError: `feeds` does not name exactly the model's inputs, or the runner is
                closed.
            InferenceError: ONNX Runtime fails while running (its message is included).
            InferenceTimeLimitError: a model with a Loop ran past its time limit.
        """
        session = self._open_session()
        self._check_feed_names(feeds, self.model_path.name)
        try:
            with denormals_flushed(self.flush_denormals):
                outputs = (session.run(list(self._output_names), dict(feeds))
                           if self._run_limit is None else self._run_limit.run(
                               session, self._output_names, feeds,
                               what=f"model {self.model_path.name!r}"))
        except InferenceTimeLimitError:
            raise
        except Exception as err:
            shapes = ", ".join(f"{name}={list(np.shape(value))}" for name, value in feeds.items())
            raise InferenceError(
                f"ONNX Runtime failed to run model {self.model_path.name!r} on inputs "
                f"{shapes}: {err}") from err
        return {name: np.asarray(value) for name, value in zip(self._output_names, outputs,
                                                                strict=True)}

    def spec(self) -> RunnerSpec:
        return RunnerSpec(
            backend=BACKEND,
            model_path=str(self.model_path),
            options={"optimization_level": self.optimization_level,
                     "intra_op_threads": self.intra_op_threads,
                     "disabled_optimizers": list(self.disabled_optimizers),
                     "flush_denormals": self.flush_denormals},
        )

    def close(self) -> None:
        """Release the session; `infer` raises afterwards. Safe to call twice."""
        self._session = None

    def _open_session(self) -> ort.InferenceSession:
        if self._session is None:
            raise InternalError(f"Runner for {self.model_path.name!r} was used after close().")
        return self._session


@contextmanager
def runner_for_model(
    model: onnx.ModelProto,
    *,
    optimization_level: OptimizationLevel = "disabled",
    intra_op_threads: int | None = None,
) -> Iterator[OnnxRuntimeRunner]:
    """An `OnnxRuntimeRunner` for an in-memory model, which may hold fuseforge plugin nodes.

    Plugin nodes are replaced by the standard ops they stand for (`plugins.decompose`), so a
    graph fused for TensorRT runs here with the same outputs, not the same speed: time it on
    TensorRT. The model is written to a temporary file (one protobuf: < 2 GiB), which the
    runner's `spec()` names while the context is open, so a child process can load it too.

    >>> with runner_for_model(fused) as runner:                      # doctest: +SKIP
    ...     outputs = runner.infer(feeds)

    Raises:
        PluginNotFoundError, PassError: a plugin node cannot be decomposed.
        EngineBuildError: ONNX Runtime cannot load the model.
    """
    runnable = runnable_in_onnxruntime(model)
    with tempfile.TemporaryDirectory(prefix="fuseforge-ort-") as folder:
        path = Path(folder) / "model.onnx"
        path.write_bytes(runnable.SerializeToString())
        with OnnxRuntimeRunner(path, optimization_level=optimization_level,
                               intra_op_threads=intra_op_threads) as runner:
            yield runner


def _tensor_spec(arg: Any) -> TensorSpec:
    # ORT names tensor types "tensor(float)", "tensor(int64)"...: the ONNX type names.
    type_name = str(arg.type)
    if type_name.startswith("tensor(") and type_name.endswith(")"):
        onnx_name = type_name[len("tensor("):-1].upper()
        try:
            dtype = dtype_name(TensorProto.DataType.Value(onnx_name))
        except ValueError:
            dtype = type_name
    else:
        dtype = type_name
    shape = tuple(_dim(dim) for dim in (arg.shape or ()))
    return TensorSpec(name=arg.name, dtype=dtype, shape=shape)


def _dim(dim: Any) -> int | str | None:
    if isinstance(dim, int):
        return dim if dim >= 0 else None
    if isinstance(dim, str) and dim:
        return dim
    return None
