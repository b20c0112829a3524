"""A second GPU backend, "fakegpu", registered beside TensorRT as a plug-in registers one, and
hosts that can run one, the other or both: what the queue routing must tell apart without a line
naming either backend."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from optimizer.capabilities import GpuInfo, HostCapabilities
from optimizer.registries.backends import (
    Backend,
    BackendSpec,
    QueueKind,
    register_backend,
    unregister_backend,
)
from optimizer.registries.plug_ins import plug_in_member
from optimizer.registries.precisions import Precision

__all__ = ["BOTH", "FAKE_GPU", "FAKE_GPU_ONLY", "FakeGpuHost", "TENSORRT_ONLY",
           "fake_gpu_registered"]

FAKE_GPU = BackendSpec(
    plug_in_member(Backend, "fakegpu"), "FakeGPU", QueueKind.GPU, queue_name="fakegpu",
    precisions=(Precision.FP32,), precision_order=(Precision.FP32,),
    runner="tests.support.fake_gpu_backend:NeverLoaded",  # routing tests never build or run
    engine_builder="tests.support.fake_gpu_backend:never_loaded",
    options=frozenset({"target_gpu"}),
    host_check="can_run_fakegpu", host_needs="an NVIDIA GPU and the FakeGPU compiler",
)


@dataclass(frozen=True)
class FakeGpuHost(HostCapabilities):
    """A host as `HostCapabilities` sees it, plus whether the FakeGPU compiler is installed."""

    fakegpu_installed: bool = False

    @property
    def can_run_fakegpu(self) -> bool:
        return self.gpu is not None and self.fakegpu_installed


_H200 = GpuInfo(0, "NVIDIA H200", "9.0", 143771)
TENSORRT_ONLY = FakeGpuHost(gpus=(_H200,), tensorrt_version="10.16.1")
FAKE_GPU_ONLY = FakeGpuHost(gpus=(_H200,), fakegpu_installed=True)
BOTH = FakeGpuHost(gpus=(_H200,), tensorrt_version="10.16.1", fakegpu_installed=True)


@contextmanager
def fake_gpu_registered() -> Iterator[None]:
    """FAKE_GPU registered in the backend registry for the block."""
    register_backend(FAKE_GPU)
    try:
        yield
    finally:
        unregister_backend(FAKE_GPU.name)
