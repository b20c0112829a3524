"""A second GPU backend, "fakegpu", planted in the backend registry beside TensorRT, and hosts
that can run one, the other or both: what the queue routing must tell apart without a line
naming either backend."""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType

import pytest

from optimizer.capabilities import GpuInfo, HostCapabilities
from optimizer.registries.backends import BACKENDS, BackendSpec, QueueKind
from optimizer.registries.precisions import Precision

__all__ = ["BOTH", "FAKE_GPU", "FAKE_GPU_ONLY", "FakeGpuHost", "TENSORRT_ONLY", "plant_fake_gpu_backend"]

# Not a `Backend` member (the enum is closed); every lookup by name compares equal to the string.
FAKE_GPU = BackendSpec(
    "fakegpu", "FakeGPU", QueueKind.GPU, queue_name="fakegpu",  # type: ignore[arg-type]
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


def plant_fake_gpu_backend(monkeypatch: pytest.MonkeyPatch, *readers: str) -> None:
    """Register FAKE_GPU for this test in the registry and in each module of `readers` (and
    core.queues) that imported BACKENDS by name."""
    planted = MappingProxyType({**BACKENDS, FAKE_GPU.name: FAKE_GPU})
    for module in ("optimizer.registries.backends", "core.queues", *readers):
        monkeypatch.setattr(f"{module}.BACKENDS", planted)
