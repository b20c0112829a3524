"""What a TensorRT engine was built with and for, and whether it may load on this machine.

A plan file runs only on the TensorRT version that built it (unless built version-compatible,
which FuseForge does not do) and on GPUs of the same compute capability
(https://docs.nvidia.com/deeplearning/tensorrt/11.4.0/getting-started/support-matrix.html).
TensorRT's own refusal is a terse deserialization error, so the metadata written next to each
engine is checked first and a mismatch is refused with the versions and GPUs named.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from optimizer.backends.tensorrt.profiles import (
    OptimizationProfileSpec,
    profiles_from_dict,
    profiles_to_dict,
)
from optimizer.errors import EngineBuildError, InternalError
from optimizer.registries.backends import Backend

__all__ = [
    "BACKEND",
    "ENGINE_FILE",
    "METADATA_FILE",
    "METADATA_VERSION",
    "EngineMetadata",
    "GpuIdentity",
    "GpuInfo",
    "capability_of",
    "check_compatible",
    "release_of",
]

BACKEND = Backend.TENSORRT
ENGINE_FILE = "engine.plan"
METADATA_FILE = "metadata.json"  # next to the engine file
METADATA_VERSION = 1


class GpuIdentity(Protocol):
    """What engine compatibility needs to know of a GPU; `GpuInfo` below, or the worker's own
    record of the GPU (e.g. optimizer.capabilities.GpuInfo), both fit."""

    @property
    def name(self) -> str: ...

    @property
    def compute_capability(self) -> str | None: ...  # "major.minor"; None if unknown


@dataclass(frozen=True)
class GpuInfo:
    """A GPU as a worker reports it: e.g. GpuInfo("NVIDIA H200", "9.0", 150_000_000_000)."""

    name: str
    compute_capability: str  # "major.minor"
    total_memory_bytes: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "compute_capability": self.compute_capability,
                "total_memory_bytes": self.total_memory_bytes}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> GpuInfo:
        return cls(name=str(data["name"]), compute_capability=str(data["compute_capability"]),
                   total_memory_bytes=data.get("total_memory_bytes"))


@dataclass(frozen=True)
class EngineMetadata:
    """The facts recorded next to a built engine (metadata.json).

    `profiles` holds one mapping per optimization profile (input name -> min/opt/max), in
    profile order; `plugins` the plugin ops the engine uses; `timing_cache_warm` whether the
    build started from a stored timing cache, so build times with and without one compare.
    """

    tensorrt_version: str
    gpu_name: str
    compute_capability: str
    precision: str
    profiles: tuple[Mapping[str, OptimizationProfileSpec], ...]
    plugins: tuple[str, ...]
    build_seconds: float
    engine_bytes: int
    engine_file: str = ENGINE_FILE
    timing_cache_warm: bool = False
    extra: Mapping[str, Any] = field(default_factory=dict)  # e.g. builder options

    def to_dict(self) -> dict[str, Any]:
        return {
            "metadata_version": METADATA_VERSION,
            "backend": BACKEND,
            "tensorrt_version": self.tensorrt_version,
            "gpu_name": self.gpu_name,
            "compute_capability": self.compute_capability,
            "precision": self.precision,
            "profiles": [profiles_to_dict(profile) for profile in self.profiles],
            "plugins": list(self.plugins),
            "build_seconds": self.build_seconds,
            "engine_bytes": self.engine_bytes,
            "engine_file": self.engine_file,
            "timing_cache_warm": self.timing_cache_warm,
            "extra": dict(self.extra),
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> EngineMetadata:
        """Rebuild from `to_dict()` output.

        Raises:
            InternalError: a field is missing or of the wrong kind, or the metadata is for
                another backend or a newer format (engines are our artifacts, so this is a
                FuseForge fault, not the user's).
        """
        try:
            if data["backend"] != BACKEND:
                raise ValueError(f"backend is {data['backend']!r}, not {BACKEND!r}")
            if int(data["metadata_version"]) > METADATA_VERSION:
                raise ValueError(f"metadata_version {data['metadata_version']} is newer than "
                                 f"this FuseForge reads ({METADATA_VERSION})")
            return cls(
                tensorrt_version=_text(data, "tensorrt_version"),
                gpu_name=_text(data, "gpu_name"),
                compute_capability=_text(data, "compute_capability"),
                precision=_text(data, "precision"),
                profiles=tuple(profiles_from_dict(profile) for profile in data["profiles"]),
                plugins=tuple(str(name) for name in data["plugins"]),
                build_seconds=float(data["build_seconds"]),
                engine_bytes=int(data["engine_bytes"]),
                engine_file=_text(data, "engine_file"),
                timing_cache_warm=bool(data.get("timing_cache_warm", False)),
                extra=dict(data.get("extra", {})),
            )
        except (KeyError, TypeError, ValueError) as err:
            raise InternalError(f"TensorRT engine metadata is malformed: {err!r}") from err

    @classmethod
    def from_json(cls, text: str) -> EngineMetadata:
        """Parse metadata.json; raises InternalError as `from_dict`, also for invalid JSON."""
        try:
            data = json.loads(text)
        except ValueError as err:
            raise InternalError(f"TensorRT engine metadata is not valid JSON: {err}") from err
        if not isinstance(data, Mapping):
            raise InternalError(
                f"TensorRT engine metadata is a JSON {type(data).__name__}, not an object.")
        return cls.from_dict(data)


def release_of(version: str) -> tuple[int, ...]:
    """The (major, minor, patch) of a TensorRT version string: "10.16.1.11" -> (10, 16, 1).

    The fourth field is the build number, which does not change the plan format.

    Raises:
        InternalError: `version` does not start with dot-separated integers.
    """
    parts = version.strip().split(".")
    numbers: list[int] = []
    for part in parts[:3]:
        digits = part.split("+")[0]
        if not digits.isdigit():
            break
        numbers.append(int(digits))
    if not numbers:
        raise InternalError(f"Cannot read TensorRT version {version!r}; expected e.g. '10.16.1'.")
    return tuple(numbers)


def check_compatible(metadata: EngineMetadata, current_gpu: GpuIdentity,
                     current_trt: str) -> tuple[str, ...]:
    """Refuse to load an engine here unless its TensorRT release and compute capability match.

    Returns warnings that do not block loading: a different GPU model of the same compute
    capability runs the engine, but its kernels were timed on the other model.

    >>> built = EngineMetadata("10.16.1.11", "NVIDIA H100", "9.0", "fp16", (), (), 1.0, 10)
    >>> len(check_compatible(built, GpuInfo("NVIDIA H200", "9.0"), "10.16.1.11"))  # a warning
    1

    Raises:
        EngineBuildError: the TensorRT (major, minor, patch) or the compute capability differ;
            the message names both sides and says to rebuild the engine on this worker.
    """
    built_release, here_release = release_of(metadata.tensorrt_version), release_of(current_trt)
    if built_release != here_release:
        raise EngineBuildError(
            f"The engine was built with TensorRT {metadata.tensorrt_version} and this worker "
            f"has TensorRT {current_trt}; a TensorRT engine loads only on the release that "
            "built it. Rebuild the engine on a worker with this TensorRT version, or run it on "
            f"a worker with TensorRT {_release_text(built_release)}.")
    here = capability_of(current_gpu)
    if _capability(metadata.compute_capability) != _capability(here):
        raise EngineBuildError(
            f"The engine was built for compute capability {metadata.compute_capability} (GPU "
            f"{metadata.gpu_name!r}) and this worker's GPU {current_gpu.name!r} has compute "
            f"capability {here}; a TensorRT engine runs only on GPUs "
            "of the compute capability it was built for. Rebuild the engine on this GPU, or "
            f"target a worker with compute capability {metadata.compute_capability}.")
    if metadata.gpu_name != current_gpu.name:
        return (
            f"Engine was built on a {metadata.gpu_name!r} and runs here on a "
            f"{current_gpu.name!r} (both compute capability {here}); "
            "its kernels were timed on the other model, so latencies may differ from a build "
            "on this GPU.",)
    return ()


def capability_of(gpu: GpuIdentity) -> str:
    """The GPU's compute capability ("9.0").

    Raises:
        InternalError: the worker could not tell it (engines must not be built or loaded
            blind to it).
    """
    if not gpu.compute_capability:
        raise InternalError(
            f"The compute capability of GPU {gpu.name!r} is unknown, so a TensorRT engine "
            "cannot be matched to it; the worker must report it (driver 510 or newer).")
    return gpu.compute_capability


def _capability(text: str) -> tuple[int, int]:
    try:
        major, minor = text.strip().split(".")
        return int(major), int(minor)
    except ValueError as err:
        raise InternalError(
            f"Cannot read compute capability {text!r}; expected 'major.minor', e.g. '9.0'."
        ) from err


def _release_text(release: tuple[int, ...]) -> str:
    return ".".join(str(part) for part in release) + ".x"


def _text(data: Mapping[str, Any], key: str) -> str:
    value = data[key]
    if not isinstance(value, str):
        raise TypeError(f"{key} is {type(value).__name__}, not str")
    return value
