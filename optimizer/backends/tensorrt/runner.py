"""Run a TensorRT engine on the GPU behind the `Runner` interface (the ONNX Runtime runner's).

`runner_for_trt_engine` opens one on an engine FuseForge built (build.py), once its metadata
matches this GPU and TensorRT. Needs at run time: the `tensorrt` package (10.x or 11.x),
NVIDIA's `cuda-python` (device buffers, the stream, copies and CUDA events; see
cuda_runtime.py) and a GPU. Both packages are imported when a runner is created, so this module
imports anywhere.

`infer` copies the feeds to device buffers (grown as shapes grow, reused otherwise), sets the
input shapes (which must lie in the engine's optimization profile), runs `execute_async_v3`
and copies the outputs back. `time_inference` measures device time with CUDA events around
each run after warm-up, on inputs already on the device.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import ml_dtypes  # noqa: F401  (registers numpy's bfloat16 and float8 dtypes)
import numpy as np

from optimizer.backends.runner import ClosesOnExit, LoadedIO, Runner, RunnerSpec
from optimizer.backends.tensorrt.logger import BuildLog, trt_logger
from optimizer.backends.tensorrt.metadata import (
    BACKEND,
    METADATA_FILE,
    EngineMetadata,
    GpuIdentity,
    check_compatible,
)
from optimizer.errors import EngineBuildError, InferenceError, InternalError
from optimizer.model.tensor_specs import TensorSpec

if TYPE_CHECKING:
    import tensorrt as trt

    from optimizer.backends.tensorrt.cuda_runtime import CudaStream, DeviceBuffer

__all__ = ["TensorRTRunner", "numpy_dtype_name", "require_tensorrt", "runner_for_trt_engine"]

# TensorRT DataType member name -> numpy dtype name (ml_dtypes supplies the extended floats).
_NUMPY_DTYPES = {
    "FLOAT": "float32", "HALF": "float16", "BF16": "bfloat16", "INT8": "int8",
    "INT32": "int32", "INT64": "int64", "BOOL": "bool", "UINT8": "uint8",
    "FP8": "float8_e4m3fn",
}


def require_tensorrt() -> None:
    """Raise InternalError unless the `tensorrt` package can be imported on this worker."""
    if importlib.util.find_spec("tensorrt") is None:
        raise InternalError(
            "The TensorRT backend needs the tensorrt Python package (10.x or 11.x), which this "
            "worker lacks; run TensorRT jobs on a GPU worker that has it.")


def numpy_dtype_name(trt_dtype_name: str) -> str:
    """The numpy dtype name for a TensorRT DataType name, e.g. "HALF" -> "float16".

    Raises:
        EngineBuildError: an engine input or output of a type numpy cannot hold (INT4, FP4,
            E8M0: packed sub-byte types).
    """
    try:
        return _NUMPY_DTYPES[trt_dtype_name]
    except KeyError:
        raise EngineBuildError(
            f"The engine has an input or output of TensorRT type {trt_dtype_name}, which the "
            "runner cannot exchange with numpy; keep the model's inputs and outputs in "
            f"{', '.join(sorted(_NUMPY_DTYPES))}.") from None


class TensorRTRunner(ClosesOnExit, LoadedIO):
    """A deserialized TensorRT engine with one execution context, created on construction.

    >>> with TensorRTRunner("engine/engine.plan") as runner:  # doctest: +SKIP
    ...     logits = runner.infer({"input": batch})["logits"]

    With `verify_metadata`, the metadata.json next to the engine is checked against this GPU
    and TensorRT first (`check_compatible`); its non-blocking notes land in `warnings`.

    Raises (on construction):
        InternalError: tensorrt or cuda-python is missing, the metadata is missing or
            malformed, or `profile_index` does not exist.
        EngineBuildError: the engine was built for another TensorRT or GPU, does not
            deserialize, or no execution context can be created (out of device memory).
    """

    def __init__(self, engine_path: Path | str, *, profile_index: int = 0,
                 verify_metadata: bool = True, log_severity: str = "WARNING") -> None:
        self.engine_path = Path(engine_path).resolve()
        self.profile_index = profile_index
        self.verify_metadata = verify_metadata
        self.log_severity = log_severity
        require_tensorrt()
        import tensorrt as trt

        from optimizer.backends.tensorrt import cuda_runtime

        self.warnings: tuple[str, ...] = ()
        if verify_metadata:
            self.warnings = _verify_metadata(self.engine_path, str(trt.__version__))
        self._log = BuildLog(min_severity=log_severity)
        self._logger = trt_logger(self._log)
        free_before = _free_device_bytes()
        runtime = trt.Runtime(self._logger)
        if runtime is None:
            raise EngineBuildError("TensorRT could not create a runtime (is a GPU visible?).")
        try:
            plan = self.engine_path.read_bytes()
        except OSError as err:
            raise InternalError(f"Cannot read TensorRT engine {str(self.engine_path)!r}: "
                                f"{err}") from err
        engine = runtime.deserialize_cuda_engine(plan)
        if engine is None:
            raise EngineBuildError(
                f"TensorRT could not load engine {self.engine_path.name!r} (an engine loads "
                "only with the TensorRT release and GPU kind that built it)"
                + _log_suffix(self._log))
        context = engine.create_execution_context()
        if context is None:
            raise EngineBuildError(
                f"TensorRT could not create an execution context for engine "
                f"{self.engine_path.name!r} (out of device memory?)" + _log_suffix(self._log))
        self._runtime: trt.Runtime | None = runtime
        self._engine: trt.ICudaEngine | None = engine
        self._context: trt.IExecutionContext | None = context
        self._stream: CudaStream | None = cuda_runtime.CudaStream()
        self._buffers: dict[str, DeviceBuffer] = {}
        if not 0 <= profile_index < engine.num_optimization_profiles:
            self.close()
            raise InternalError(
                f"Engine {self.engine_path.name!r} has {engine.num_optimization_profiles} "
                f"optimization profile(s); profile {profile_index} does not exist.")
        if profile_index and not context.set_optimization_profile_async(
                profile_index, self._stream.handle):
            self.close()
            raise EngineBuildError(f"TensorRT could not select optimization profile "
                                   f"{profile_index} of engine {self.engine_path.name!r}.")
        self._stream.synchronize()
        inputs, outputs, dtypes = [], [], {}
        for index in range(engine.num_io_tensors):
            name = engine.get_tensor_name(index)
            if engine.get_tensor_location(name) != trt.TensorLocation.DEVICE:
                self.close()
                raise EngineBuildError(
                    f"Engine tensor {name!r} lives in host memory (a shape tensor); the "
                    "TensorRT runner supports device tensors only.")
            dtype = numpy_dtype_name(engine.get_tensor_dtype(name).name)
            dtypes[name] = np.dtype(dtype)
            shape = tuple(None if dim < 0 else int(dim) for dim in engine.get_tensor_shape(name))
            spec = TensorSpec(name=name, dtype=dtype, shape=shape)
            if engine.get_tensor_mode(name) == trt.TensorIOMode.INPUT:
                inputs.append(spec)
            else:
                outputs.append(spec)
        self._inputs = tuple(inputs)
        self._outputs = tuple(outputs)
        self._output_names = tuple(spec.name for spec in outputs)
        self._dtypes: dict[str, np.dtype[Any]] = dtypes
        # Weights and the context's activation memory; I/O buffers come on first use.
        self.loaded_device_bytes = max(free_before - _free_device_bytes(), 0)
        self.activation_bytes = int(engine.device_memory_size_v2)

    @property
    def io_buffer_bytes(self) -> int:
        """Device bytes held by the input and output buffers (grown to the largest shapes)."""
        return sum(buffer.nbytes for buffer in self._buffers.values())

    @property
    def timing_clock(self) -> str:
        return "cuda_events"

    @property
    def device_bytes_in_use(self) -> int:
        """Loading (weights, context, its activation memory) plus the I/O buffers so far."""
        return self.loaded_device_bytes + self.io_buffer_bytes

    def device_memory(self) -> dict[str, int]:
        """Device bytes this runner holds: what loading took (weights, context), the
        context's activation memory (part of that), and the I/O buffers so far."""
        return {"loaded_device_bytes": self.loaded_device_bytes,
                "activation_bytes": self.activation_bytes,
                "io_buffer_bytes": self.io_buffer_bytes}

    def profile_shapes(self, name: str) -> tuple[tuple[int, ...], tuple[int, ...],
                                                  tuple[int, ...]]:
        """(min, opt, max) shapes input `name` accepts in the selected profile."""
        engine = self._open()[0]
        low, opt, high = engine.get_tensor_profile_shape(name, self.profile_index)
        return tuple(low), tuple(opt), tuple(high)

    def infer(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run once; returns output name -> array.

        Raises:
            InternalError: `feeds` does not name exactly the engine's inputs, or the runner is
                closed.
            InferenceError: a feed has the wrong dtype or a shape outside the engine's
                profile, or TensorRT or CUDA fails while running.
        """
        hosts = self._bind(feeds)
        self._execute()
        return self._fetch(hosts)

    def time_inference(self, feeds: Mapping[str, np.ndarray], *, warmup: int = 10,
                       iterations: int = 100) -> tuple[float, ...]:
        """Device milliseconds of `iterations` runs on `feeds`, timed with CUDA events after
        `warmup` untimed runs. Inputs are copied once, so only the engine is timed.

        Raises:
            As `infer`.
        """
        from optimizer.backends.tensorrt.cuda_runtime import CudaEventPair

        hosts = self._bind(feeds)
        stream = self._open()[2]
        stream.synchronize()  # the input copies read `hosts`
        del hosts
        for _ in range(max(warmup, 0)):
            self._execute(synchronize=False)
        stream.synchronize()
        events = CudaEventPair()
        try:
            latencies = []
            for _ in range(iterations):
                events.start(stream)
                self._execute(synchronize=False)
                events.stop(stream)
                latencies.append(events.elapsed_ms())
        finally:
            events.destroy()
        return tuple(latencies)

    def profile_layers(self, feeds: Mapping[str, np.ndarray], *, runs: int = 10,
                       warmup: int = 2) -> dict[str, float]:
        """Each layer's median milliseconds over `runs` runs on `feeds`, as TensorRT's own
        profiler reports them (an `IProfiler` on the context; enqueue left asynchronous and
        the timings asked for once the stream has synchronized). The profiler slows a run:
        time the latency apart (`time_inference`).

        Raises:
            As `infer`.
        """
        import tensorrt as trt

        class LayerTimes(trt.IProfiler):
            def __init__(self) -> None:
                trt.IProfiler.__init__(self)
                self.runs: list[dict[str, float]] = []

            def report_layer_time(self, layer_name: str, ms: float) -> None:
                self.runs[-1][layer_name] = self.runs[-1].get(layer_name, 0.0) + ms

        hosts = self._bind(feeds)
        _, context, stream = self._open()
        stream.synchronize()  # the input copies read `hosts`
        del hosts
        for _ in range(max(warmup, 0)):
            self._execute()
        times = LayerTimes()
        context.profiler = times
        # Left off after: later runs report nothing unless report_to_profiler asks them to.
        context.enqueue_emits_profile = False
        for _ in range(max(runs, 1)):
            times.runs.append({})
            self._execute()
            context.report_to_profiler()
        layers = {name for run in times.runs for name in run}
        return {name: float(np.median([run.get(name, 0.0) for run in times.runs]))
                for name in layers}

    def spec(self) -> RunnerSpec:
        return RunnerSpec(
            backend=BACKEND,
            model_path=str(self.engine_path),
            options={"profile_index": self.profile_index,
                     "verify_metadata": self.verify_metadata,
                     "log_severity": self.log_severity},
        )

    def close(self) -> None:
        """Free the device buffers, the stream, the context and the engine. Safe to call twice."""
        for buffer in self._buffers.values():
            buffer.free()
        self._buffers = {}
        if self._stream is not None:
            self._stream.destroy()
            self._stream = None
        # The context uses the engine, which uses the runtime: release in that order.
        self._context = None
        self._engine = None
        self._runtime = None

    def _open(self) -> tuple[trt.ICudaEngine, trt.IExecutionContext, CudaStream]:
        if self._engine is None or self._context is None or self._stream is None:
            raise InternalError(f"Runner for {self.engine_path.name!r} was used after close().")
        return self._engine, self._context, self._stream

    def _bind(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Copy inputs to the device and give every I/O tensor an address; returns the host
        arrays, which must live until the stream has synchronized."""
        from optimizer.backends.tensorrt import cuda_runtime

        _, context, stream = self._open()
        expected = {spec.name for spec in self._inputs}
        if set(feeds) != expected:
            raise InternalError(
                f"Feeds for engine {self.engine_path.name!r} name {sorted(feeds)}, but its "
                f"inputs are {sorted(expected)}.")
        hosts: dict[str, np.ndarray] = {}
        for spec in self._inputs:
            given = np.asarray(feeds[spec.name])
            if given.dtype != self._dtypes[spec.name]:
                raise InferenceError(
                    f"Input {spec.name!r} is {given.dtype}, but engine "
                    f"{self.engine_path.name!r} takes {spec.dtype}; convert the feed.")
            array = np.ascontiguousarray(given)
            if not context.set_input_shape(spec.name, tuple(array.shape)):
                low, _, high = self.profile_shapes(spec.name)
                raise InferenceError(
                    f"Input {spec.name!r} has shape {list(array.shape)}, outside the engine's "
                    f"optimization profile (min {list(low)}, max {list(high)}); feed a shape "
                    "in that range or rebuild with a wider profile." + _log_suffix(self._log))
            hosts[spec.name] = array
            buffer = self._buffer(spec.name, array.nbytes)
            cuda_runtime.copy_to_device(buffer, array, stream)
            context.set_tensor_address(spec.name, buffer.ptr)
        for name in self._output_names:
            shape = tuple(int(dim) for dim in context.get_tensor_shape(name))
            if any(dim < 0 for dim in shape):
                raise InferenceError(
                    f"Output {name!r} has a data-dependent shape {list(shape)} (e.g. NonZero); "
                    "the TensorRT runner needs output shapes known from the input shapes.")
            output = np.empty(shape, dtype=self._dtypes[name])
            hosts[name] = output
            context.set_tensor_address(name, self._buffer(name, output.nbytes).ptr)
        return hosts

    def _execute(self, *, synchronize: bool = True) -> None:
        _, context, stream = self._open()
        if not context.execute_async_v3(stream.handle):
            raise InferenceError(f"TensorRT failed to run engine {self.engine_path.name!r}"
                                 + _log_suffix(self._log))
        if synchronize:
            stream.synchronize()

    def _fetch(self, hosts: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        from optimizer.backends.tensorrt import cuda_runtime

        stream = self._open()[2]
        for name in self._output_names:
            cuda_runtime.copy_to_host(hosts[name], self._buffers[name], stream)
        stream.synchronize()
        return {name: hosts[name] for name in self._output_names}

    def _buffer(self, name: str, nbytes: int) -> DeviceBuffer:
        from optimizer.backends.tensorrt.cuda_runtime import DeviceBuffer

        buffer = self._buffers.get(name)
        if buffer is None or buffer.nbytes < nbytes:
            if buffer is not None:
                self._open()[2].synchronize()  # the old buffer may still be in use
                buffer.free()
            buffer = self._buffers[name] = DeviceBuffer(nbytes)
        return buffer


def runner_for_trt_engine(engine_dir_or_metadata: Path, *,
                          gpu: GpuIdentity | None = None) -> TensorRTRunner:
    """Load a built engine after checking its metadata against this GPU and TensorRT.

    Accepts the engine's folder or its metadata.json; `gpu` is this worker's GPU (None: asked
    from CUDA).

    Raises:
        InternalError: the metadata is missing or malformed (our artifact).
        EngineBuildError: the engine was built for another TensorRT release or compute
            capability, or does not load.
    """
    path = Path(engine_dir_or_metadata)
    metadata_path = path / METADATA_FILE if path.is_dir() else path
    try:
        metadata = EngineMetadata.from_json(metadata_path.read_text())
    except OSError as err:
        raise InternalError(
            f"TensorRT engine metadata {str(metadata_path)!r} cannot be read: {err}") from err
    require_tensorrt()
    import tensorrt as trt

    if gpu is None:
        from optimizer.backends.tensorrt.cuda_runtime import gpu_info

        gpu = gpu_info()
    check_compatible(metadata, gpu, str(trt.__version__))
    return TensorRTRunner(metadata_path.parent / metadata.engine_file, verify_metadata=False)


def _verify_metadata(engine_path: Path, tensorrt_version: str) -> tuple[str, ...]:
    from optimizer.backends.tensorrt.cuda_runtime import gpu_info

    metadata_path = engine_path.parent / METADATA_FILE
    try:
        text = metadata_path.read_text()
    except OSError as err:
        raise InternalError(
            f"Engine {engine_path.name!r} has no readable {METADATA_FILE} next to it ({err}); "
            "pass verify_metadata=False to load an engine FuseForge did not build.") from err
    metadata = EngineMetadata.from_json(text)
    return check_compatible(metadata, gpu_info(), tensorrt_version)


def _free_device_bytes() -> int:
    from optimizer.backends.tensorrt.cuda_runtime import call

    free, _total = call("cudaMemGetInfo")
    return int(free)


def _log_suffix(log: BuildLog) -> str:
    errors = log.error_text()
    return f":\n{errors}" if errors else "."


if TYPE_CHECKING:  # mypy proves the class fits the Runner protocol
    _AS_RUNNER: type[Runner] = TensorRTRunner
