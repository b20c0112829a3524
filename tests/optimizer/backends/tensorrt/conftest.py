"""Fixtures for tests that need TensorRT and a GPU: they skip, saying so, where one is missing."""

from __future__ import annotations

import importlib.util

import pytest


@pytest.fixture
def trt_gpu() -> None:
    """Skip unless tensorrt, cuda-python and a CUDA device are present."""
    pytest.importorskip("tensorrt", reason="TensorRT is not installed here; engine-building "
                                           "tests skip")
    if not any(importlib.util.find_spec(name) is not None
               for name in ("cuda.bindings.runtime", "cuda.cudart")):
        pytest.skip("cuda-python is not installed here; the TensorRT runner's tests skip")
    from optimizer.backends.tensorrt.cuda_runtime import call
    from optimizer.errors import InferenceError

    try:
        count = call("cudaGetDeviceCount")
    except InferenceError as err:
        pytest.skip(f"no usable CUDA device here ({err}); TensorRT tests skip")
    if not count:
        pytest.skip("no CUDA device here; TensorRT tests skip")
