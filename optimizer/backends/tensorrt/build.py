"""Build a TensorRT engine from an ONNX model: parse, configure, build, save, inspect, record.

Each step is a function named by its result, so a worker (or a test on a GPU) can run them one
by one: `network_from_onnx` (network.py) -> `builder_config` -> `engine_from_network` ->
`save_engine`; `build_trt_engine` runs them all and writes the engine's metadata and report next
to it. The network is strongly typed, so no precision flag is set: `model_precision.py` checks
that the model carries the job's precision first. TensorRT calls that fail return None (the
stubs cannot say so); each one is checked.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import onnx
from google.protobuf.message import DecodeError

from optimizer.backends.tensorrt.inspector import node_op_types, parse_engine_information
from optimizer.backends.tensorrt.logger import SEVERITIES, BuildLog, LogLine, trt_logger
from optimizer.backends.tensorrt.metadata import (
    ENGINE_FILE,
    METADATA_FILE,
    EngineMetadata,
    GpuIdentity,
    capability_of,
    check_compatible,
)
from optimizer.backends.tensorrt.model_precision import Precision, check_model_precision
from optimizer.backends.tensorrt.network import network_from_onnx
from optimizer.backends.tensorrt.profiles import OptimizationProfileSpec, resolve_profiles
from optimizer.backends.tensorrt.progress import BuildProgress, trt_progress_monitor
from optimizer.backends.tensorrt.runner import TensorRTRunner, require_tensorrt
from optimizer.backends.tensorrt.timing_cache import (
    TimingCacheLoad,
    load_timing_cache,
    serialize_timing_cache,
)
from optimizer.errors import EngineBuildError, InputShapeError, InternalError
from optimizer.graphs import iter_nodes
from optimizer.jsonable import json_safe
from optimizer.plugins.trt_registry import register_with_tensorrt
from optimizer.tensor_specs import summarize_model

if TYPE_CHECKING:
    import tensorrt as trt

__all__ = [
    "ENGINE_FILE",
    "METADATA_FILE",
    "PLUGIN_DOMAIN",
    "REPORT_FILE",
    "TrtBuildOptions",
    "TrtEngine",
    "build_trt_engine",
    "builder_config",
    "engine_from_network",
    "plugin_ops",
    "runner_for_trt_engine",
    "save_engine",
]

REPORT_FILE = "engine_report.json"
REPORT_VERSION = 1
PLUGIN_DOMAIN = "fuseforge"  # the ONNX domain of FuseForge's plugin ops


@dataclass(frozen=True)
class TrtBuildOptions:
    """How to build. `precision` is the job's; the model must already carry it (model_precision.py)."""

    precision: Precision = "fp32"
    workspace_bytes: int = 8 * 2**30  # scratch memory the builder's tactics may use
    builder_optimization_level: int | None = None  # 0-5; None keeps TensorRT's default (3)
    # TF32 matmuls/convs keep fp32 range but round to a 10-bit mantissa (~1e-3 relative); off
    # so an "fp32" engine computes in fp32 and validates against the original at fp32 tolerances.
    tf32: bool = False
    log_severity: str = "INFO"  # lowest TensorRT log severity kept for the job's events

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class TrtEngine:
    """A built engine: the plan, its metadata, its inspector report, and the timing cache to
    store back under `TimingCacheKey.for_gpu(gpu, metadata.tensorrt_version)`."""

    engine_path: Path
    metadata_path: Path
    metadata: EngineMetadata
    report_path: Path
    report: dict[str, Any]  # the engine report's summary (EngineReport.summary)
    timing_cache: bytes
    log: tuple[LogLine, ...] = ()


def builder_config(
    builder: trt.Builder,
    network: trt.INetworkDefinition,
    *,
    options: TrtBuildOptions,
    profiles: Mapping[str, OptimizationProfileSpec],
    timing_cache: bytes | None = None,
    progress_monitor: trt.IProgressMonitor | None = None,
) -> tuple[trt.IBuilderConfig, TimingCacheLoad]:
    """A builder config: workspace limit, DETAILED profiling (for the engine inspector), the
    optimization profile, the timing cache (`timing_cache` when TensorRT accepts it) and the
    progress monitor. No precision flags: the network is strongly typed.

    Raises:
        EngineBuildError: TensorRT cannot create the config or accept the profile.
        InputShapeError: a profile contradicts the network's input shapes.
    """
    require_tensorrt()
    import tensorrt as trt

    config = builder.create_builder_config()
    if config is None:
        raise EngineBuildError("TensorRT could not create a builder config.")
    config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, options.workspace_bytes)
    config.profiling_verbosity = trt.ProfilingVerbosity.DETAILED
    if options.builder_optimization_level is not None:
        config.builder_optimization_level = options.builder_optimization_level
    if not options.tf32:
        config.clear_flag(trt.BuilderFlag.TF32)
    if progress_monitor is not None:
        config.progress_monitor = progress_monitor
    add_optimization_profile(builder, network, config, profiles)
    cache = load_timing_cache(config, timing_cache)
    return config, cache


def add_optimization_profile(
    builder: trt.Builder, network: trt.INetworkDefinition, config: trt.IBuilderConfig,
    profiles: Mapping[str, OptimizationProfileSpec],
) -> int | None:
    """Add one optimization profile covering the network's dynamic inputs; its index, or None
    when every input is static (TensorRT needs no profile then).

    Raises:
        InputShapeError: an input has no profile, or a profile's rank or fixed dims contradict
            the network (e.g. the exporter fixed a dim the ONNX declared dynamic).
        EngineBuildError: an input is a shape tensor (needs values, not shapes), or TensorRT
            refuses the profile.
    """
    profile = builder.create_optimization_profile()
    if profile is None:
        raise EngineBuildError("TensorRT could not create an optimization profile.")
    dynamic = 0
    for index in range(network.num_inputs):
        tensor = network.get_input(index)
        name = tensor.name
        dims = tuple(int(dim) for dim in tensor.shape)
        if tensor.is_shape_tensor:
            raise EngineBuildError(
                f"Input {name!r} is a shape tensor (its values set output shapes); FuseForge "
                "builds engines only for models whose inputs are data tensors.")
        spec = profiles.get(name)
        if spec is None:
            raise InputShapeError(f"Network input {name!r} has no optimization profile.",
                                  input_name=name)
        _check_profile_fits(name, dims, spec)
        if any(dim < 0 for dim in dims):
            profile.set_shape(name, spec.min, spec.opt, spec.max)
            dynamic += 1
    if not dynamic:
        return None
    index = config.add_optimization_profile(profile)
    if index < 0:
        raise EngineBuildError(
            "TensorRT refused the optimization profile "
            f"{ {name: spec.to_dict() for name, spec in profiles.items()} }.")
    return int(index)


def engine_from_network(
    builder: trt.Builder, network: trt.INetworkDefinition, config: trt.IBuilderConfig, *,
    log: BuildLog | None = None, model_name: str = "model",
) -> bytes:
    """Build and serialize the engine (the long step: tactic timing).

    Raises:
        EngineBuildError: TensorRT returns no engine; the message quotes its error log lines.
    """
    plan = builder.build_serialized_network(network, config)
    if plan is None:
        errors = log.error_text() if log is not None else ""
        raise EngineBuildError(
            f"TensorRT could not build an engine from model {model_name!r}"
            + (f":\n{errors}" if errors else "; its log has no error lines.")
            + "\nFor out-of-memory errors, lower the workspace or the profile's max shapes.")
    return bytes(plan)


def save_engine(plan: bytes, path: Path) -> Path:
    """Write the serialized engine to `path` (write then rename: no half-written plans)."""
    path = Path(path)
    partial = path.with_name(path.name + ".partial")
    partial.write_bytes(plan)
    os.replace(partial, path)
    return path


def inspect_engine(plan: bytes, logger: trt.ILogger) -> tuple[str, int]:
    """Load the plan and read its inspector JSON; also its device memory need in bytes.

    Loading also proves the plan deserializes on this GPU before it is stored.

    Raises:
        EngineBuildError: the plan does not load, or no inspector can be created.
    """
    require_tensorrt()
    import tensorrt as trt

    runtime = trt.Runtime(logger)
    engine = runtime.deserialize_cuda_engine(plan) if runtime is not None else None
    if engine is None:
        raise EngineBuildError("TensorRT built an engine that it cannot load back.")
    inspector = engine.create_engine_inspector()
    if inspector is None:
        raise EngineBuildError("TensorRT could not create an engine inspector.")
    text = inspector.get_engine_information(trt.LayerInformationFormat.JSON)
    memory = int(engine.device_memory_size_v2)
    del inspector, engine, runtime  # free the device copy before the caller goes on
    return str(text), memory


def plugin_ops(model: onnx.ModelProto) -> tuple[str, ...]:
    """The FuseForge plugin op types (domain `PLUGIN_DOMAIN`) the model uses, sorted."""
    return tuple(sorted({node.op_type for node in iter_nodes(model)
                         if node.domain == PLUGIN_DOMAIN}))


def build_trt_engine(
    model_path: Path,
    out_dir: Path,
    *,
    options: TrtBuildOptions,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    profiles: Mapping[str, Any] | None = None,
    timing_cache: bytes | None = None,
    on_progress: Callable[[float, str], None] | None = None,
    on_log: Callable[[LogLine], None] | None = None,
    gpu: GpuIdentity | None = None,
) -> TrtEngine:
    """Build `model_path` into `out_dir`/engine.plan with metadata.json and engine_report.json.

    `profiles` maps inputs to {"min", "opt", "max"} shapes (`resolve_profiles`); inputs left
    out are built for their `input_shapes` entry or the model's shape. `timing_cache` is the
    stored cache for this GPU and TensorRT (None: start cold); the returned engine carries the
    cache to store back. `on_progress(fraction, phase)` and `on_log(line)` receive the
    builder's progress and log lines; `gpu` is this worker's GPU, anything with `name` and
    `compute_capability` (None: asked from CUDA).

    Raises:
        InvalidModelError, InputShapeError: the model or the shapes are unusable.
        EngineBuildError: the model does not carry `options.precision`, TensorRT rejects it
            (per node), or the build fails (with TensorRT's error lines).
        InternalError: TensorRT or cuda-python is not installed on this worker.
    """
    model_path, out_dir = Path(model_path), Path(out_dir)
    _check_options(options)
    model = _load(model_path)
    # Everything checkable without TensorRT comes first, so a bad job fails fast anywhere.
    check_model_precision(model, options.precision, model_name=model_path.name)
    resolved = resolve_profiles(summarize_model(model).inputs, profiles, input_shapes=input_shapes)
    plugins = plugin_ops(model)
    node_ops = node_op_types(model)
    del model
    require_tensorrt()
    import tensorrt as trt

    if plugins:
        # The parser imports a fuseforge node as the plugin registered under its op type; the
        # creators exist once registered in this process (the engine then carries the kernels).
        register_with_tensorrt()
    if gpu is None:
        from optimizer.backends.tensorrt.cuda_runtime import gpu_info

        gpu = gpu_info()
    compute_capability = capability_of(gpu)
    log = BuildLog(on_log, min_severity=options.log_severity)
    progress = BuildProgress(on_progress)
    # TensorRT holds these two by pointer: they must outlive the builder and its config.
    logger = trt_logger(log)
    monitor = trt_progress_monitor(progress)
    builder = trt.Builder(logger)
    if builder is None:
        raise EngineBuildError("TensorRT could not create a builder (is a GPU visible?).")
    network, parser = network_from_onnx(builder, model_path.read_bytes(), model_path=model_path,
                                        model_name=model_path.name)
    config, cache_load = builder_config(builder, network, options=options, profiles=resolved,
                                        timing_cache=timing_cache,
                                        progress_monitor=monitor)
    started = time.perf_counter()
    try:
        plan = engine_from_network(builder, network, config, log=log,
                                   model_name=model_path.name)
    finally:
        _raise_callback_error(log, progress)
    build_seconds = time.perf_counter() - started
    new_cache = serialize_timing_cache(config)
    del parser, network, config, builder, monitor
    out_dir.mkdir(parents=True, exist_ok=True)
    engine_path = save_engine(plan, out_dir / ENGINE_FILE)
    inspector_json, device_memory = inspect_engine(plan, logger)
    report = parse_engine_information(inspector_json, onnx_nodes=node_ops.keys())
    summary = report.summary(node_ops)
    report_path = _write_json(out_dir / REPORT_FILE, {
        "report_version": REPORT_VERSION, "summary": summary,
        "inspector": json.loads(inspector_json) if inspector_json.strip() else {}})
    metadata = EngineMetadata(
        tensorrt_version=str(trt.__version__),
        gpu_name=gpu.name,
        compute_capability=compute_capability,
        precision=options.precision,
        profiles=(resolved,),
        plugins=plugins,
        build_seconds=build_seconds,
        engine_bytes=len(plan),
        engine_file=ENGINE_FILE,
        timing_cache_warm=cache_load.warm,
        extra={"options": options.to_dict(), "device_memory_bytes": device_memory,
               "timing_cache_loaded_bytes": cache_load.loaded_bytes,
               "timing_cache_note": cache_load.note, "source_model": model_path.name,
               "log_lines_dropped": log.dropped},
    )
    metadata_path = out_dir / METADATA_FILE
    _write_text(metadata_path, metadata.to_json())
    progress.finish()
    return TrtEngine(engine_path=engine_path, metadata_path=metadata_path, metadata=metadata,
                     report_path=report_path, report=summary, timing_cache=new_cache,
                     log=log.lines)


def runner_for_trt_engine(engine_dir_or_metadata: Path, *,
                          gpu: GpuIdentity | None = None) -> TensorRTRunner:
    """Load a built engine after checking its metadata against this GPU and TensorRT.

    Accepts the engine's folder or its metadata.json.

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


def _check_options(options: TrtBuildOptions) -> None:
    # Job settings are validated where they enter (API, worker); a bad value here is a bug.
    if options.workspace_bytes < 1:
        raise InternalError(f"workspace_bytes must be positive, got {options.workspace_bytes}.")
    level = options.builder_optimization_level
    if level is not None and not 0 <= level <= 5:
        raise InternalError(f"builder_optimization_level must be 0-5 or None, got {level}.")
    if options.log_severity not in SEVERITIES:
        raise InternalError(f"log_severity {options.log_severity!r} is not one of "
                            f"{', '.join(SEVERITIES)}.")


def _check_profile_fits(name: str, dims: tuple[int, ...], spec: OptimizationProfileSpec) -> None:
    if len(dims) != len(spec.min):
        raise InputShapeError(
            f"Input {name!r} has rank {len(dims)} in the TensorRT network (shape "
            f"{list(dims)}), but its profile has rank {len(spec.min)}.", input_name=name)
    for axis, dim in enumerate(dims):
        if dim >= 0 and not spec.min[axis] == spec.opt[axis] == spec.max[axis] == dim:
            raise InputShapeError(
                f"Input {name!r} axis {axis} is fixed at {dim} in the TensorRT network, but "
                f"its profile spans {spec.min[axis]}..{spec.max[axis]} there; use {dim}.",
                input_name=name)


def _raise_callback_error(log: BuildLog, progress: BuildProgress) -> None:
    # A job callback failed inside a TensorRT callback (see logger.py): its error, not the
    # cancelled build's, is the one to report.
    for error in (progress.callback_error, log.callback_error):
        if error is not None:
            raise error


def _load(path: Path) -> onnx.ModelProto:
    try:
        return onnx.load(path, format="protobuf", load_external_data=False)
    except (OSError, DecodeError) as err:
        raise EngineBuildError(f"Could not read model {str(path)!r}: {err}") from err


def _write_json(path: Path, data: Mapping[str, Any]) -> Path:
    _write_text(path, json.dumps(json_safe(data), indent=2, sort_keys=True) + "\n")
    return path


def _write_text(path: Path, text: str) -> None:
    partial = path.with_name(path.name + ".partial")
    partial.write_text(text)
    os.replace(partial, path)
