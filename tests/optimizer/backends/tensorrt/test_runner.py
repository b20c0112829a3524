"""TensorRTRunner pieces testable without a GPU: dtype mapping and the missing-package errors."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from optimizer.backends.tensorrt.runner import TensorRTRunner, numpy_dtype_name
from optimizer.errors import EngineBuildError, InternalError

HAS_TENSORRT = importlib.util.find_spec("tensorrt") is not None
HAS_CUDA_PYTHON = importlib.util.find_spec("cuda") is not None


@pytest.mark.parametrize(("trt_name", "numpy_name"), [
    ("FLOAT", "float32"), ("HALF", "float16"), ("BF16", "bfloat16"), ("INT8", "int8"),
    ("INT32", "int32"), ("INT64", "int64"), ("BOOL", "bool"), ("UINT8", "uint8"),
    ("FP8", "float8_e4m3fn"),
])
def test_engine_io_types_map_to_numpy_dtypes(trt_name, numpy_name):
    assert numpy_dtype_name(trt_name) == numpy_name
    assert np.dtype(numpy_name).name == numpy_name  # ml_dtypes registers the extended floats


@pytest.mark.parametrize("trt_name", ["INT4", "FP4", "E8M0"])
def test_packed_sub_byte_io_types_are_refused(trt_name):
    with pytest.raises(EngineBuildError, match=f"type {trt_name}.*cannot exchange"):
        numpy_dtype_name(trt_name)


def test_runner_class_has_the_runner_protocol_members():
    # mypy checks the signatures (runner.py assigns the class to a type[Runner]).
    for name in ("inputs", "output_names", "infer", "spec", "__enter__", "__exit__", "close"):
        assert hasattr(TensorRTRunner, name), name


@pytest.mark.skipif(HAS_TENSORRT, reason="tensorrt is installed here")
def test_runner_without_tensorrt_is_an_internal_error(tmp_path):
    with pytest.raises(InternalError, match="tensorrt Python package"):
        TensorRTRunner(tmp_path / "engine.plan")


@pytest.mark.skipif(HAS_CUDA_PYTHON, reason="cuda-python is installed here")
def test_cuda_calls_without_cuda_python_are_an_internal_error():
    from optimizer.backends.tensorrt.cuda_runtime import gpu_info

    with pytest.raises(InternalError, match="pip install cuda-python"):
        gpu_info()
