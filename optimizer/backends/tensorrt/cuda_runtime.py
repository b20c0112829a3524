"""The few CUDA runtime calls a TensorRT runner needs, through NVIDIA's cuda-python bindings.

TensorRT's Python API has no device allocator or memcpy of its own, so device buffers, the
stream, host<->device copies, CUDA events and the device query go through cuda-python
(`pip install cuda-python`: module `cuda.bindings.runtime`, `cuda.cudart` in releases before
12.6), the same calls NVIDIA's TensorRT samples make (samples/python/common_runtime.py). It is
imported on first use, so this module imports anywhere; every call's status is checked.
cuda-python ships no type information, so the module is held as `Any` and each wrapper here
gives its result a type.
"""

from __future__ import annotations

import importlib
from typing import Any

import numpy as np

from optimizer.backends.tensorrt.metadata import GpuInfo
from optimizer.errors import InferenceError, InternalError

__all__ = [
    "CudaEventPair",
    "CudaStream",
    "DeviceBuffer",
    "copy_to_device",
    "copy_to_host",
    "cudart",
    "gpu_info",
]

_MODULES = ("cuda.bindings.runtime", "cuda.cudart")
_cudart: Any = None


def cudart() -> Any:
    """The cuda-python runtime module.

    Raises:
        InternalError: cuda-python is not installed (a GPU worker's image must have it).
    """
    global _cudart
    if _cudart is None:
        for name in _MODULES:
            try:
                _cudart = importlib.import_module(name)
                break
            except ImportError:
                continue
        else:
            raise InternalError(
                "The TensorRT runner needs NVIDIA's cuda-python package (module "
                "cuda.bindings.runtime); install it on the GPU worker: pip install cuda-python.")
    return _cudart


def call(name: str, *args: Any) -> Any:
    """Call cudart.`name`(*args) and return its result without the status.

    cuda-python returns (status,) or (status, value, ...); this returns None, the value, or
    the tuple of values.

    Raises:
        InferenceError: the status is not cudaSuccess (the CUDA error name is included).
    """
    runtime = cudart()
    result = getattr(runtime, name)(*args)
    status, values = result[0], tuple(result[1:])
    if status != runtime.cudaError_t.cudaSuccess:
        raise InferenceError(f"CUDA call {name} failed: {_error_name(status)}.")
    if not values:
        return None
    return values[0] if len(values) == 1 else values


def gpu_info(device: int = 0) -> GpuInfo:
    """Name, compute capability and memory of CUDA device `device`.

    Raises:
        InternalError: cuda-python is missing. InferenceError: the device cannot be queried.
    """
    props = call("cudaGetDeviceProperties", device)
    name = props.name
    if isinstance(name, bytes):
        name = name.split(b"\0", 1)[0].decode(errors="replace")
    return GpuInfo(name=str(name).strip(), compute_capability=f"{props.major}.{props.minor}",
                   total_memory_bytes=int(props.totalGlobalMem))


class DeviceBuffer:
    """`nbytes` of device memory; `ptr` is its address as an int. Free it with `free()`."""

    def __init__(self, nbytes: int) -> None:
        self.nbytes = max(int(nbytes), 1)  # cudaMalloc(0) gives no usable address
        self.ptr: int = int(call("cudaMalloc", self.nbytes))

    def free(self) -> None:
        if self.ptr:
            ptr, self.ptr = self.ptr, 0
            call("cudaFree", ptr)


class CudaStream:
    """A CUDA stream; `handle` is what TensorRT's execute_async_v3 takes."""

    def __init__(self) -> None:
        self._stream: Any = call("cudaStreamCreate")
        self.handle: int = int(self._stream)

    def synchronize(self) -> None:
        call("cudaStreamSynchronize", self._stream)

    @property
    def raw(self) -> Any:
        """The cuda-python stream object, for other cudart calls."""
        return self._stream

    def destroy(self) -> None:
        if self._stream is not None:
            stream, self._stream = self._stream, None
            call("cudaStreamDestroy", stream)


class CudaEventPair:
    """Two CUDA events that time the work enqueued on a stream between `start` and `stop`."""

    def __init__(self) -> None:
        self._start: Any = call("cudaEventCreate")
        self._stop: Any = call("cudaEventCreate")

    def start(self, stream: CudaStream) -> None:
        call("cudaEventRecord", self._start, stream.raw)

    def stop(self, stream: CudaStream) -> None:
        call("cudaEventRecord", self._stop, stream.raw)

    def elapsed_ms(self) -> float:
        """Milliseconds between the two events; waits for `stop` to complete."""
        call("cudaEventSynchronize", self._stop)
        return float(call("cudaEventElapsedTime", self._start, self._stop))

    def destroy(self) -> None:
        for event in (self._start, self._stop):
            if event is not None:
                call("cudaEventDestroy", event)
        self._start = self._stop = None


def copy_to_device(buffer: DeviceBuffer, array: np.ndarray, stream: CudaStream) -> None:
    """Enqueue a copy of the C-contiguous `array` into `buffer` on `stream`."""
    if array.nbytes > buffer.nbytes:
        raise InternalError(f"A {array.nbytes}-byte array does not fit a {buffer.nbytes}-byte "
                            "device buffer.")
    if array.nbytes:
        kind = cudart().cudaMemcpyKind.cudaMemcpyHostToDevice
        call("cudaMemcpyAsync", buffer.ptr, array.ctypes.data, array.nbytes, kind, stream.raw)


def copy_to_host(array: np.ndarray, buffer: DeviceBuffer, stream: CudaStream) -> None:
    """Enqueue a copy from `buffer` into the C-contiguous, writable `array` on `stream`."""
    if array.nbytes > buffer.nbytes:
        raise InternalError(f"A {buffer.nbytes}-byte device buffer cannot fill a "
                            f"{array.nbytes}-byte array.")
    if array.nbytes:
        kind = cudart().cudaMemcpyKind.cudaMemcpyDeviceToHost
        call("cudaMemcpyAsync", array.ctypes.data, buffer.ptr, array.nbytes, kind, stream.raw)


def _error_name(status: Any) -> str:
    # cudaError_t is an enum: its name ("cudaErrorMemoryAllocation") says what went wrong.
    return str(getattr(status, "name", status))
