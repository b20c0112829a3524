"""Build a TensorRT engine from an ONNX model: parse, configure, build, save, inspect, record.

Each step is a function named by its result, so a worker (or a test on a GPU) can run them one
by one: `network_from_onnx` (network.py) -> `builder_config` (builder_config.py) ->
`engine_from_network` -> `save_engine`; `build_trt_engine` chains them and writes the engine's
metadata and report next to it, and `runner_for_trt_engine` (runner.py) loads the result. The
network is strongly typed, so no precision flag is set: `model_precision.py` checks that the
model carries the job's precision first. TensorRT calls that fail return None (the stubs cannot
say so); each one is checked.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict, Unpack

import onnx
from google.protobuf.message import DecodeError

from optimizer.backends.tensorrt.builder_config import TrtBuildOptions, builder_config
from optimizer.backends.tensorrt.inspector import node_op_types, parse_engine_information
from optimizer.backends.tensorrt.logger import SEVERITIES, BuildLog, LogLine, trt_logger
from optimizer.backends.tensorrt.metadata import (
    ENGINE_FILE,
    METADATA_FILE,
    EngineMetadata,
    GpuIdentity,
    capability_of,
)
from optimizer.backends.tensorrt.model_precision import check_model_precision
from optimizer.backends.tensorrt.network import network_from_onnx
from optimizer.backends.tensorrt.profiles import OptimizationProfileSpec, resolve_profiles
from optimizer.backends.tensorrt.progress import BuildProgress, trt_progress_monitor
from optimizer.backends.tensorrt.runner import require_tensorrt
from optimizer.backends.tensorrt.timing_cache import TimingCacheLoad, serialize_timing_cache
from optimizer.errors import EngineBuildError, InternalError
from optimizer.jsonable import json_safe
from optimizer.model.graphs import iter_nodes
from optimizer.model.tensor_specs import summarize_model
from optimizer.plugins.base import DOMAIN as PLUGIN_DOMAIN
from optimizer.plugins.trt_registry import register_with_tensorrt

if TYPE_CHECKING:
    import tensorrt as trt

__all__ = [
    "ENGINE_FILE",
    "METADATA_FILE",
    "REPORT_FILE",
    "TrtBuildArguments",
    "TrtEngine",
    "build_trt_engine",
    "engine_from_network",
    "plugin_ops",
    "save_engine",
]

REPORT_FILE = "engine_report.json"
REPORT_VERSION = 1


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
    """The FuseForge plugin op types (domain `plugins.DOMAIN`) the model uses, sorted."""
    return tuple(sorted({node.op_type for node in iter_nodes(model)
                         if node.domain == PLUGIN_DOMAIN}))


class TrtBuildArguments(TypedDict, total=False):
    """The optional arguments of every engine builder, declared once: `build_trt_engine`,
    the toolkit's `EngineBuilder` and the tests' FakeTensorRT take them as `**given`."""

    input_shapes: Mapping[str, Sequence[int]] | None
    profiles: Mapping[str, Any] | None
    timing_cache: bytes | None
    on_progress: Callable[[float, str], None] | None
    on_log: Callable[[LogLine], None] | None
    gpu: GpuIdentity | None


def build_trt_engine(
    model_path: Path,
    out_dir: Path,
    *,
    options: TrtBuildOptions,
    **given: Unpack[TrtBuildArguments],
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
    input_shapes, profiles = given.get("input_shapes"), given.get("profiles")
    timing_cache, gpu = given.get("timing_cache"), given.get("gpu")
    _check_options(options)
    # Everything checkable without TensorRT comes first, so a bad job fails fast anywhere.
    model = _model_facts(model_path, options.precision, profiles, input_shapes)
    require_tensorrt()
    if model.plugins:
        # The parser imports a fuseforge node as the plugin registered under its op type; the
        # creators exist once registered in this process (the engine then carries the kernels).
        register_with_tensorrt()
    gpu = _this_gpu() if gpu is None else gpu
    compute_capability = capability_of(gpu)  # refused before the long build, not after it
    log = BuildLog(given.get("on_log"), min_severity=options.log_severity)
    progress = BuildProgress(given.get("on_progress"))
    built = _plan_from_onnx(model_path, options, model.profiles, timing_cache, log, progress)
    out_dir.mkdir(parents=True, exist_ok=True)
    engine_path = save_engine(built.plan, out_dir / ENGINE_FILE)
    report_path = out_dir / REPORT_FILE
    summary, device_memory = _save_report(built, model.node_ops, report_path)
    metadata = _engine_metadata(model_path, options, model, built, log, gpu_name=gpu.name,
                                compute_capability=compute_capability,
                                device_memory=device_memory)
    metadata_path = out_dir / METADATA_FILE
    _write_text(metadata_path, metadata.to_json())
    progress.finish()
    return TrtEngine(engine_path=engine_path, metadata_path=metadata_path, metadata=metadata,
                     report_path=report_path, report=summary, timing_cache=built.timing_cache,
                     log=log.lines)


@dataclass(frozen=True)
class _ModelFacts:
    """What a build needs from the ONNX model, read (and checked) without TensorRT."""

    profiles: dict[str, OptimizationProfileSpec]
    plugins: tuple[str, ...]
    node_ops: dict[str, str]  # node name -> op type, to name the fusions TensorRT made


def _model_facts(model_path: Path, precision: str, profiles: Mapping[str, Any] | None,
                 input_shapes: Mapping[str, Sequence[int]] | None) -> _ModelFacts:
    model = _load(model_path)
    check_model_precision(model, precision, model_name=model_path.name)
    resolved = resolve_profiles(summarize_model(model).inputs, profiles,
                                input_shapes=input_shapes)
    return _ModelFacts(profiles=resolved, plugins=plugin_ops(model),
                       node_ops=node_op_types(model))


def _this_gpu() -> GpuIdentity:
    from optimizer.backends.tensorrt.cuda_runtime import gpu_info

    return gpu_info()


@dataclass(frozen=True)
class _BuiltPlan:
    """A serialized engine with what its build used and measured."""

    plan: bytes
    timing_cache: bytes  # the cache after the build, to store back
    cache_load: TimingCacheLoad
    build_seconds: float
    tensorrt_version: str
    logger: trt.ILogger  # the build's logger, reused to load the plan back


def _plan_from_onnx(model_path: Path, options: TrtBuildOptions,
                    profiles: Mapping[str, OptimizationProfileSpec], timing_cache: bytes | None,
                    log: BuildLog, progress: BuildProgress) -> _BuiltPlan:
    """network_from_onnx -> builder_config -> engine_from_network, the TensorRT objects freed
    before returning."""
    import tensorrt as trt

    # TensorRT holds these two by pointer: they must outlive the builder and its config.
    logger = trt_logger(log)
    monitor = trt_progress_monitor(progress)
    builder = trt.Builder(logger)
    if builder is None:
        raise EngineBuildError("TensorRT could not create a builder (is a GPU visible?).")
    network, parser = network_from_onnx(builder, model_path.read_bytes(), model_path=model_path,
                                        model_name=model_path.name)
    config, cache_load = builder_config(builder, network, options=options, profiles=profiles,
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
    return _BuiltPlan(plan=plan, timing_cache=new_cache, cache_load=cache_load,
                      build_seconds=build_seconds, tensorrt_version=str(trt.__version__),
                      logger=logger)


def _save_report(built: _BuiltPlan, node_ops: Mapping[str, str],
                 path: Path) -> tuple[dict[str, Any], int]:
    """Write the engine report (the inspector's JSON and its summary) to `path`; the summary and
    the engine's device memory need in bytes."""
    inspector_json, device_memory = inspect_engine(built.plan, built.logger)
    report = parse_engine_information(inspector_json, onnx_nodes=node_ops.keys())
    summary = report.summary(node_ops)
    _write_json(path, {
        "report_version": REPORT_VERSION, "summary": summary,
        "inspector": json.loads(inspector_json) if inspector_json.strip() else {}})
    return summary, device_memory


def _engine_metadata(model_path: Path, options: TrtBuildOptions, model: _ModelFacts,
                     built: _BuiltPlan, log: BuildLog, *, gpu_name: str,
                     compute_capability: str, device_memory: int) -> EngineMetadata:
    return EngineMetadata(
        tensorrt_version=built.tensorrt_version,
        gpu_name=gpu_name,
        compute_capability=compute_capability,
        precision=options.precision,
        profiles=(model.profiles,),
        plugins=model.plugins,
        build_seconds=built.build_seconds,
        engine_bytes=len(built.plan),
        engine_file=ENGINE_FILE,
        timing_cache_warm=built.cache_load.warm,
        extra={"options": options.to_dict(), "device_memory_bytes": device_memory,
               "timing_cache_loaded_bytes": built.cache_load.loaded_bytes,
               "timing_cache_note": built.cache_load.note, "source_model": model_path.name,
               "log_lines_dropped": log.dropped},
    )


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
