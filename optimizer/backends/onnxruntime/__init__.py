"""ONNX Runtime backend: offline-optimized engines (build.py) and a CPU runner (runner.py)."""

from optimizer.backends.onnxruntime.build import (
    OrtBuildOptions,
    OrtEngine,
    build_ort_engine,
    runner_for_engine,
)
from optimizer.backends.onnxruntime.runner import OnnxRuntimeRunner

__all__ = [
    "OnnxRuntimeRunner",
    "OrtBuildOptions",
    "OrtEngine",
    "build_ort_engine",
    "runner_for_engine",
]
