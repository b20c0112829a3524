"""Timing-cache keys: one file per (GPU model, compute capability, TensorRT version)."""

from __future__ import annotations

import re

import pytest

from optimizer.backends.tensorrt.metadata import GpuInfo
from optimizer.backends.tensorrt.timing_cache import TimingCacheKey
from optimizer.errors import InternalError


def test_file_name_names_tensorrt_compute_capability_and_gpu():
    key = TimingCacheKey.for_gpu(GpuInfo("NVIDIA H200", "9.0"), "10.16.1.11")

    assert key.file_name == "trt-10.16.1.11_sm90_nvidia-h200.timing-cache"


@pytest.mark.parametrize("changed", [
    TimingCacheKey("NVIDIA H100 80GB HBM3", "9.0", "10.16.1.11"),
    TimingCacheKey("NVIDIA H200", "10.0", "10.16.1.11"),
    TimingCacheKey("NVIDIA H200", "9.0", "11.4.0.106"),
])
def test_any_part_of_the_key_changes_the_file(changed):
    assert changed.file_name != TimingCacheKey("NVIDIA H200", "9.0", "10.16.1.11").file_name


@pytest.mark.parametrize("gpu_name", ["NVIDIA A100-SXM4-80GB", "../../etc/passwd", "GPU 0: x/y",
                                      "", "Ünïcode GPU"])
def test_file_name_is_safe_for_any_store(gpu_name):
    name = TimingCacheKey(gpu_name, "8.0", "10.16.1.11").file_name

    assert re.fullmatch(r"[a-z0-9.\-_]+", name), name
    assert "/" not in name and ".." not in name.replace(".timing-cache", "")


def test_key_for_a_gpu_of_unknown_compute_capability_is_refused():
    with pytest.raises(InternalError, match="unknown"):
        TimingCacheKey.for_gpu(GpuInfo("NVIDIA H200", ""), "10.16.1.11")
