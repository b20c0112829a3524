"""Configure a TensorRT builder for a job: its options, workspace, optimization profile, timing cache.

`builder_config` is the step between `network_from_onnx` (network.py) and `engine_from_network`
(build.py). No precision flag is set: the network is strongly typed, so the model must already
carry the job's precision (model_precision.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from optimizer.backends.tensorrt.profiles import OptimizationProfileSpec
from optimizer.backends.tensorrt.runner import require_tensorrt
from optimizer.backends.tensorrt.timing_cache import TimingCacheLoad, load_timing_cache
from optimizer.errors import EngineBuildError, InputShapeError
from optimizer.registries.precisions import Precision

if TYPE_CHECKING:
    import tensorrt as trt

__all__ = ["QUANTIZED_JOB_REFERENCE", "TrtBuildOptions", "add_optimization_profile",
           "builder_config"]

# The precision a quantized job's unfused reference engines are built at: what a GPU user runs
# without calibration data (worker/gpu/engine_builds.py).
QUANTIZED_JOB_REFERENCE = Precision.FP16


@dataclass(frozen=True)
class TrtBuildOptions:
    """How to build. `precision` is the job's; the model must already carry it."""

    precision: Precision = Precision.FP32
    workspace_bytes: int = 8 * 2**30  # scratch memory the builder's tactics may use
    builder_optimization_level: int | None = None  # 0-5; None keeps TensorRT's default (3)
    # TF32 matmuls/convs keep fp32 range but round to a 10-bit mantissa (~1e-3 relative); off
    # so an "fp32" engine computes in fp32 and validates against the original at fp32 tolerances.
    tf32: bool = False
    log_severity: str = "INFO"  # lowest TensorRT log severity kept for the job's events

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


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
