"""TensorRT backend: engines built from ONNX (network.py, build.py) and a GPU runner (runner.py).

Importing this package needs neither TensorRT nor a GPU: `tensorrt` and `cuda-python` are
imported by the functions that use them, so profiles, metadata checks, the precision check and
the engine report parser work (and are tested) anywhere.
"""

from optimizer.backends.tensorrt.build import (
    REPORT_FILE,
    TrtEngine,
    build_trt_engine,
    engine_from_network,
    plugin_ops,
    save_engine,
)
from optimizer.backends.tensorrt.builder_config import (
    QUANTIZED_JOB_REFERENCE,
    TrtBuildOptions,
    builder_config,
)
from optimizer.backends.tensorrt.inspector import (
    EngineLayer,
    EngineReport,
    IOTensor,
    LayerFusion,
    LayerTensor,
    node_op_types,
    parse_engine_information,
)
from optimizer.backends.tensorrt.logger import BuildLog, LogLine
from optimizer.backends.tensorrt.metadata import (
    ENGINE_FILE,
    METADATA_FILE,
    EngineMetadata,
    GpuIdentity,
    GpuInfo,
    check_compatible,
)
from optimizer.backends.tensorrt.model_precision import (
    ModelPrecision,
    check_model_precision,
    model_precision,
)
from optimizer.backends.tensorrt.network import (
    ParserIssue,
    describe_parser_issues,
    network_creation_flags,
    network_from_onnx,
)
from optimizer.backends.tensorrt.profiles import OptimizationProfileSpec, resolve_profiles
from optimizer.backends.tensorrt.progress import BuildProgress
from optimizer.backends.tensorrt.runner import TensorRTRunner, runner_for_trt_engine
from optimizer.backends.tensorrt.timing_cache import (
    TimingCacheKey,
    TimingCacheLoad,
    load_timing_cache,
    serialize_timing_cache,
)

__all__ = [
    "ENGINE_FILE",
    "METADATA_FILE",
    "QUANTIZED_JOB_REFERENCE",
    "REPORT_FILE",
    "BuildLog",
    "BuildProgress",
    "EngineLayer",
    "EngineMetadata",
    "EngineReport",
    "GpuIdentity",
    "GpuInfo",
    "IOTensor",
    "LayerFusion",
    "LayerTensor",
    "LogLine",
    "ModelPrecision",
    "OptimizationProfileSpec",
    "ParserIssue",
    "TensorRTRunner",
    "TimingCacheKey",
    "TimingCacheLoad",
    "TrtBuildOptions",
    "TrtEngine",
    "build_trt_engine",
    "builder_config",
    "check_compatible",
    "check_model_precision",
    "describe_parser_issues",
    "engine_from_network",
    "load_timing_cache",
    "model_precision",
    "network_creation_flags",
    "network_from_onnx",
    "node_op_types",
    "parse_engine_information",
    "plugin_ops",
    "resolve_profiles",
    "runner_for_trt_engine",
    "save_engine",
    "serialize_timing_cache",
]
