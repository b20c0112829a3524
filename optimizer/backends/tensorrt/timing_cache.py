"""Reuse TensorRT's kernel timings between builds: the cache key, and loading and saving the cache.

The builder times candidate kernels ("tactics") for every layer; the timing cache keeps those
results so a later build of a similar model skips the measurements. A cache is valid only for
the device, CUDA and TensorRT versions that filled it
(https://docs.nvidia.com/deeplearning/tensorrt/10.16.1/performance/builder-performance.html), so
caches are stored per (GPU model, compute capability, TensorRT version), one file each. The
store's I/O belongs to the caller: this module takes and returns bytes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from optimizer.backends.tensorrt.metadata import GpuIdentity, capability_of
from optimizer.errors import EngineBuildError

if TYPE_CHECKING:
    import tensorrt as trt

__all__ = ["TimingCacheKey", "TimingCacheLoad", "load_timing_cache", "serialize_timing_cache"]


@dataclass(frozen=True)
class TimingCacheKey:
    """Which builds may share a timing cache."""

    gpu_name: str
    compute_capability: str
    tensorrt_version: str

    @classmethod
    def for_gpu(cls, gpu: GpuIdentity, tensorrt_version: str) -> TimingCacheKey:
        """Raises InternalError when the GPU's compute capability is unknown."""
        return cls(gpu.name, capability_of(gpu), tensorrt_version)

    @property
    def file_name(self) -> str:
        """A file name safe in any store, e.g. "trt-10.16.1.11_sm90_nvidia-h200.timing-cache"."""
        capability = self.compute_capability.replace(".", "")
        return (f"trt-{_slug(self.tensorrt_version)}_sm{_slug(capability)}_"
                f"{_slug(self.gpu_name)}.timing-cache")


@dataclass(frozen=True)
class TimingCacheLoad:
    """How a build's timing cache started: `warm` when stored timings were loaded."""

    warm: bool
    loaded_bytes: int
    note: str = ""  # why a stored cache was not used


def load_timing_cache(config: trt.IBuilderConfig, stored: bytes | None) -> TimingCacheLoad:
    """Give `config` a timing cache: `stored` when TensorRT accepts it, else an empty one.

    A stored cache that TensorRT cannot read or that does not match this GPU or TensorRT
    version (a key collision, or a store mix-up) is not an error: the build starts cold and
    the returned note says why.

    Raises:
        EngineBuildError: TensorRT cannot create even an empty timing cache.
    """
    note = ""
    if stored:
        cache = config.create_timing_cache(stored)
        # The binding returns None for a cache it cannot parse (stubs cannot say Optional).
        if cache is None:
            note = f"the stored timing cache ({len(stored)} bytes) could not be read"
        elif config.set_timing_cache(cache, False):
            return TimingCacheLoad(warm=True, loaded_bytes=len(stored))
        else:
            note = (f"the stored timing cache ({len(stored)} bytes) does not match this GPU or "
                    "TensorRT version")
    empty = config.create_timing_cache(b"")
    if empty is None or not config.set_timing_cache(empty, False):
        raise EngineBuildError("TensorRT could not create an empty timing cache for this build.")
    return TimingCacheLoad(warm=False, loaded_bytes=0, note=note)


def serialize_timing_cache(config: trt.IBuilderConfig) -> bytes:
    """The timings `config`'s cache holds after a build, to store under its `TimingCacheKey`.

    Raises:
        EngineBuildError: the config has no timing cache, or it cannot be serialized.
    """
    cache = config.get_timing_cache()
    if cache is None:
        raise EngineBuildError("The builder config has no timing cache to save.")
    data = cache.serialize()
    if data is None:
        raise EngineBuildError("TensorRT could not serialize the build's timing cache.")
    return bytes(data)


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9.]+", "-", text.lower()).strip("-.") or "unknown"
