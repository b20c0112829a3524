"""Where a benchmark ran: the CPU, threads, memory, OS, library versions and GPU, as a plain dict
stored with every benchmark record, and the digest of the fields two records must share to be
compared.

A latency means little without the machine behind it: the same engine is twice as fast on
twice the cores, and an ONNX Runtime upgrade moves every figure. Capture never fails: what
cannot be read (no GPU, no TensorRT, no nvidia-smi, no /proc) is None.

    >>> env = capture_environment(threads=1, worker="host:42", memory_bandwidth_gb_s=11.8)
    >>> environment_key(env) == environment_key({**env, "worker": "elsewhere:7"})
    True
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import subprocess
from collections.abc import Mapping
from functools import cache
from importlib import metadata
from pathlib import Path
from typing import Any

from optimizer.capabilities import tensorrt_version

__all__ = [
    "ENVIRONMENT_KEY_EXCLUDES",
    "capture_environment",
    "environment_differences",
    "environment_key",
    "host_cores",
]

# Left out of the key: the worker names one process (its successor on the same machine measures
# the same thing), and the bandwidth is measured each time, so it wobbles by a few percent
# between identical machines; neither is a reason two records cannot be compared.
ENVIRONMENT_KEY_EXCLUDES = frozenset({"worker", "memory_bandwidth_gb_s"})
_KEY_CHARS = 16
_NVIDIA_SMI_TIMEOUT_S = 3.0
# Max clocks, not current ones: a GPU idles at a low clock between runs, so the current one
# says when it was read, not what the card is.
_GPU_FIELDS = ("name", "driver_version", "clocks.max.sm", "clocks.max.memory")
_DEVICE_FIELDS = ("tensorrt", "cuda", "driver", "gpu", "gpu_sm_clock_mhz", "gpu_memory_clock_mhz")


def capture_environment(*, threads: int | None, worker: str | None,
                        memory_bandwidth_gb_s: float | None) -> dict[str, Any]:
    """This machine and process as a benchmark saw it. `threads`: the intra-op threads the
    benchmark ran with (None: the runtime's default, one per physical core); `worker`: the worker's id
    ("host:pid"); `memory_bandwidth_gb_s`: optimizer/measure/memory_bandwidth.py's figure, if measured."""
    cores = host_cores()
    return {
        "cpu": _cpu_model(),
        "cpu_cores": cores,
        "threads": threads,
        "memory_gib": _memory_gib(),
        "os": platform.platform(),
        "python": platform.python_version(),
        "onnxruntime": _version("onnxruntime"),
        "onnx": _version("onnx"),
        # OpenVINO's engines run on it; a version change moves their figures (None: not here).
        "openvino": _version("openvino"),
        **_device(),
        "worker": worker,
        "memory_bandwidth_gb_s": memory_bandwidth_gb_s,
    }


def environment_key(environment: Mapping[str, Any]) -> str:
    """A 16-hex-digit SHA-256 digest of every field but the worker and the measured bandwidth
    (ENVIRONMENT_KEY_EXCLUDES says why): records with equal keys ran on the same kind of
    machine with the same software and may be compared."""
    kept = {name: value for name, value in environment.items()
            if name not in ENVIRONMENT_KEY_EXCLUDES}
    text = json.dumps(kept, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:_KEY_CHARS]


def environment_differences(a: Mapping[str, Any] | None, b: Mapping[str, Any] | None) -> list[str]:
    """What differs between two environments in the fields the key covers, as "field a vs b".

    >>> environment_differences({"onnxruntime": "1.22.0", "worker": "a:1"},
    ...                         {"onnxruntime": "1.23.2", "worker": "b:2"})
    ['onnxruntime 1.22.0 vs 1.23.2']
    """
    first, second = a or {}, b or {}
    names = sorted((set(first) | set(second)) - ENVIRONMENT_KEY_EXCLUDES)
    return [f"{name} {_shown(first.get(name))} vs {_shown(second.get(name))}"
            for name in names if first.get(name) != second.get(name)]


def _shown(value: Any) -> str:
    return "none" if value is None else str(value)


def _cpu_model() -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            if line.startswith("model name") and ":" in line:
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or None


def host_cores() -> int:
    """The cores this process may run on (its affinity, which containers and taskset narrow)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _memory_gib() -> float | None:
    try:
        pages, page_size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, OSError, ValueError):
        return None
    return round(pages * page_size / 2**30, 1) if pages > 0 and page_size > 0 else None


def _version(distribution: str) -> str | None:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


@cache
def _device() -> dict[str, Any]:
    """TensorRT, CUDA runtime, driver and GPU (first visible) with its max clocks; None each
    where absent. Cached: a process's GPU and libraries do not change while it runs."""
    found: dict[str, Any] = dict.fromkeys(_DEVICE_FIELDS)
    found["tensorrt"] = tensorrt_version()[0]
    found["cuda"] = _cuda_runtime_version()
    gpu = _nvidia_smi_gpu()
    if gpu is not None:
        found.update(gpu)
    return found


def _cuda_runtime_version() -> str | None:
    """The CUDA runtime's version through cuda-python, imported lazily like the TensorRT runner
    does (optimizer/backends/tensorrt/cuda_runtime.py); None without it or a driver."""
    try:
        from optimizer.backends.tensorrt.cuda_runtime import cudart
        runtime = cudart()
        status, version = runtime.cudaRuntimeGetVersion()
        if status != runtime.cudaError_t.cudaSuccess:
            return None
        return f"{int(version) // 1000}.{int(version) % 1000 // 10}"
    except Exception:  # noqa: BLE001 - no cuda-python, no driver: the field stays None
        return None


def _nvidia_smi_gpu() -> dict[str, Any] | None:
    executable = shutil.which("nvidia-smi")
    if executable is None:
        return None
    command = [executable, f"--query-gpu={','.join(_GPU_FIELDS)}", "--format=csv,noheader,nounits"]
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    if visible:  # the GPU this process computes on, not the machine's first
        command += ["-i", visible]
    try:
        done = subprocess.run(
            command,
            capture_output=True, text=True, timeout=_NVIDIA_SMI_TIMEOUT_S, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        return None
    fields = [field.strip() for field in lines[0].split(",")]
    if len(fields) != len(_GPU_FIELDS):
        return None
    name, driver, sm_clock, memory_clock = fields
    return {"gpu": name or None, "driver": driver or None,
            "gpu_sm_clock_mhz": _number(sm_clock), "gpu_memory_clock_mhz": _number(memory_clock)}


def _number(text: str) -> int | None:
    try:
        return int(float(text))
    except ValueError:
        return None
