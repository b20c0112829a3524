"""Detect what this host can build engines on: its NVIDIA GPUs and the TensorRT version, or none;
the CPU backends' packages (OpenVINO, NNCF) and the CPU flags a precision needs (bf16's).

GPUs come from NVML (`pynvml`, when installed) or else from `nvidia-smi`; TensorRT from a lazy
`import tensorrt`; OpenVINO and NNCF from their installed distributions' metadata (nothing is
imported); the CPU flags from /proc/cpuinfo. Nothing here needs a GPU: a host without one gets
`HostCapabilities` with no GPUs and notes that say why, e.g.

    >>> caps = detect_capabilities()
    >>> caps.describe()
    'none (no NVIDIA GPU: nvidia-smi not found; TensorRT: not installed)'

Compute capabilities are kept as "major.minor" strings ("9.0"); `sm_tag` turns them into the
form CUDA and the worker queues use ("sm90").
"""

import csv
import io
import os
import re
import shutil
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from optimizer.registries.precisions import PRECISIONS

__all__ = [
    "GpuInfo",
    "HostCapabilities",
    "cpu_capabilities",
    "detect_capabilities",
    "detect_gpus",
    "gpu_name_slug",
    "normalize_compute_capability",
    "package_version",
    "parse_nvidia_smi_csv",
    "precision_cpu_flags",
    "sm_tag",
    "tensorrt_version",
    "visible_gpus",
]

# The fields asked of nvidia-smi, in this order; `compute_cap` needs driver 510 or newer.
NVIDIA_SMI_FIELDS = ("index", "name", "compute_cap", "memory.total", "uuid", "driver_version")
_NVIDIA_SMI_TIMEOUT_S = 15.0

_CC_DOTTED = re.compile(r"^(?:sm_?)?(\d{1,2})\.(\d)$", re.IGNORECASE)
_CC_SM = re.compile(r"^sm_?(\d{1,2})(\d)$", re.IGNORECASE)


@dataclass(frozen=True)
class GpuInfo:
    """One GPU as the driver reports it; `compute_capability` is None where the driver cannot say."""

    index: int
    name: str
    compute_capability: str | None
    memory_total_mib: int | None
    uuid: str | None = None
    driver_version: str | None = None

    @property
    def sm(self) -> str | None:
        return sm_tag(self.compute_capability) if self.compute_capability else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "name": self.name,
            "compute_capability": self.compute_capability,
            "memory_total_mib": self.memory_total_mib,
            "uuid": self.uuid,
            "driver_version": self.driver_version,
        }


@dataclass(frozen=True)
class HostCapabilities:
    """The GPUs this process may use (CUDA_VISIBLE_DEVICES applied), the TensorRT version, and
    notes on anything that could not be detected."""

    gpus: tuple[GpuInfo, ...] = ()
    tensorrt_version: str | None = None
    notes: tuple[str, ...] = field(default=())
    openvino_version: str | None = None
    nncf_version: str | None = None
    # The CPU flags some precision's CPU kernels need (`PrecisionSpec.cpu_flags`) that this
    # host's CPU has: what a CPU backend's precision refusals read (`PrecisionSpec.cpu_refusal`).
    cpu_flags: frozenset[str] = frozenset()

    @property
    def gpu(self) -> GpuInfo | None:
        """The GPU builds run on: the first visible one (CUDA device 0)."""
        return self.gpus[0] if self.gpus else None

    @property
    def can_build_tensorrt(self) -> bool:
        return self.gpu is not None and self.tensorrt_version is not None

    @property
    def can_run_openvino(self) -> bool:
        """OpenVINO builds and runs the engines, NNCF quantizes them: a host needs both."""
        return self.openvino_version is not None and self.nncf_version is not None

    def describe(self) -> str:
        """One line for logs and job messages: "none (...)" on a host without a GPU."""
        trt = f"TensorRT {self.tensorrt_version}" if self.tensorrt_version else "TensorRT: not installed"
        if not self.gpus:
            why = "; ".join(self.notes) if self.notes else "none detected"
            return f"none (no NVIDIA GPU: {why}; {trt}){self._cpu_side()}"
        gpus = ", ".join(
            f"{g.name} (compute capability {g.compute_capability or 'unknown'}, "
            f"{g.memory_total_mib if g.memory_total_mib is not None else '?'} MiB)"
            for g in self.gpus
        )
        return f"{gpus}; {trt}{self._cpu_side()}"

    def _cpu_side(self) -> str:
        openvino = (f"OpenVINO {self.openvino_version}" if self.openvino_version
                    else "OpenVINO: not installed")
        nncf = f"NNCF {self.nncf_version}" if self.nncf_version else "NNCF: not installed"
        flags = ", ".join(sorted(self.cpu_flags)) or "none"
        return f"; {openvino}; {nncf}; CPU precision flags: {flags}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "gpus": [g.to_dict() for g in self.gpus],
            "tensorrt_version": self.tensorrt_version,
            "notes": list(self.notes),
            "openvino_version": self.openvino_version,
            "nncf_version": self.nncf_version,
            "cpu_flags": sorted(self.cpu_flags),
        }


def normalize_compute_capability(text: str) -> str | None:
    """ "9.0", "sm90", "sm_90" or "SM_120" as "major.minor" ("9.0", "12.0"); None if `text` is not a
    compute capability (e.g. a GPU name such as "H200")."""
    text = text.strip()
    match = _CC_DOTTED.match(text) or _CC_SM.match(text)
    if match is None:
        return None
    return f"{int(match.group(1))}.{match.group(2)}"


def sm_tag(compute_capability: str) -> str:
    """ "9.0" → "sm90", "12.0" → "sm120" (the CUDA architecture name).

    Raises:
        ValueError: `compute_capability` is not one (see normalize_compute_capability).
    """
    normalized = normalize_compute_capability(compute_capability)
    if normalized is None:
        raise ValueError(f"{compute_capability!r} is not a compute capability like '9.0' or 'sm90'")
    major, minor = normalized.split(".")
    return f"sm{major}{minor}"


def gpu_name_slug(name: str) -> str:
    """A GPU name as a queue-safe token: "NVIDIA H200" and "h200" → "h200",
    "NVIDIA GeForce RTX 4090" → "geforce-rtx-4090"."""
    slug = re.sub(r"[^a-z0-9]+", "-", name.strip().lower()).strip("-")
    return slug.removeprefix("nvidia-") if slug != "nvidia" else slug


def _optional(value: str) -> str | None:
    value = value.strip()
    return None if value in ("", "[N/A]", "N/A", "[Not Supported]") else value


def parse_nvidia_smi_csv(text: str, fields: Sequence[str] = NVIDIA_SMI_FIELDS) -> tuple[GpuInfo, ...]:
    """Parse `nvidia-smi --query-gpu=<fields> --format=csv,noheader,nounits` output.

    `fields` must name "index" and "name"; "compute_cap", "memory.total" (MiB), "uuid" and
    "driver_version" are read where present. "[N/A]" becomes None.

    Raises:
        ValueError: a line has a different number of values than `fields`, or an index or
            memory value is not a number.
    """
    gpus = []
    for row in csv.reader(io.StringIO(text), skipinitialspace=True):
        if not row or all(not cell.strip() for cell in row):
            continue
        if len(row) != len(fields):
            raise ValueError(
                f"nvidia-smi line {','.join(row)!r} has {len(row)} values; expected {len(fields)} "
                f"({', '.join(fields)})"
            )
        values = dict(zip(fields, (cell.strip() for cell in row), strict=True))
        cc = _optional(values.get("compute_cap", ""))
        memory = _optional(values.get("memory.total", ""))
        gpus.append(
            GpuInfo(
                index=int(values["index"]),
                name=values["name"],
                compute_capability=normalize_compute_capability(cc) if cc else None,
                memory_total_mib=int(float(memory)) if memory else None,
                uuid=_optional(values.get("uuid", "")),
                driver_version=_optional(values.get("driver_version", "")),
            )
        )
    return tuple(gpus)


def _gpus_from_nvidia_smi(executable: str) -> tuple[tuple[GpuInfo, ...], str | None]:
    path = shutil.which(executable)
    if path is None:
        return (), f"{executable} not found"
    fields: Sequence[str] = NVIDIA_SMI_FIELDS
    for _attempt in range(2):
        try:
            done = subprocess.run(
                [path, f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"],
                capture_output=True,
                text=True,
                timeout=_NVIDIA_SMI_TIMEOUT_S,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as err:
            return (), f"{executable} failed to run ({type(err).__name__}: {err})"
        message = (done.stderr or done.stdout).strip()
        if done.returncode == 0:
            try:
                return parse_nvidia_smi_csv(done.stdout, fields), None
            except ValueError as err:
                return (), f"{executable} output not understood ({err})"
        if "compute_cap" in fields and "compute_cap" in message:
            # Drivers older than 510 do not know the field: ask again without it.
            fields = tuple(f for f in fields if f != "compute_cap")
            continue
        break
    return (), f"{executable} exited with code {done.returncode}: {message[:300] or 'no output'}"


def _gpus_from_nvml() -> tuple[tuple[GpuInfo, ...], str | None]:
    try:
        import pynvml  # nvidia-ml-py, optional: nvidia-smi is asked where it is missing
    except ImportError:
        return (), None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as err:
        return (), f"NVML could not start ({err})"
    try:
        driver = _text(pynvml.nvmlSystemGetDriverVersion())
        gpus = []
        for index in range(int(pynvml.nvmlDeviceGetCount())):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(handle)
            gpus.append(
                GpuInfo(
                    index=index,
                    name=_text(pynvml.nvmlDeviceGetName(handle)),
                    compute_capability=f"{int(major)}.{int(minor)}",
                    memory_total_mib=int(pynvml.nvmlDeviceGetMemoryInfo(handle).total) // 2**20,
                    uuid=_text(pynvml.nvmlDeviceGetUUID(handle)),
                    driver_version=driver,
                )
            )
        return tuple(gpus), None
    except pynvml.NVMLError as err:
        return (), f"NVML query failed ({err})"
    finally:
        pynvml.nvmlShutdown()


def _text(value: object) -> str:
    # Older pynvml releases return bytes, newer ones str.
    return value.decode() if isinstance(value, bytes) else str(value)


def detect_gpus(nvidia_smi: str = "nvidia-smi") -> tuple[tuple[GpuInfo, ...], tuple[str, ...]]:
    """All GPUs the driver reports (NVML first, then nvidia-smi), and notes on what failed."""
    notes = []
    for source in (_gpus_from_nvml, lambda: _gpus_from_nvidia_smi(nvidia_smi)):
        gpus, note = source()
        if gpus:
            return gpus, ()
        if note is not None:
            notes.append(note)
    return (), tuple(notes)


def visible_gpus(gpus: Sequence[GpuInfo], cuda_visible_devices: str | None) -> tuple[GpuInfo, ...]:
    """The GPUs CUDA will show this process, in CUDA's order (device 0 first).

    As CUDA does, entries of CUDA_VISIBLE_DEVICES are indices or (prefixes of) UUIDs, and the list
    ends at the first entry that names no GPU ("-1" hides them all). Unset means all GPUs.
    """
    if cuda_visible_devices is None:
        return tuple(gpus)
    visible: list[GpuInfo] = []
    for token in (t.strip() for t in cuda_visible_devices.split(",")):
        match = next(
            (
                g
                for g in gpus
                if (token.isdigit() and g.index == int(token))
                or (token.startswith("GPU-") and g.uuid is not None and g.uuid.startswith(token))
            ),
            None,
        )
        if match is None or match in visible:
            break
        visible.append(match)
    return tuple(visible)


def tensorrt_version() -> tuple[str | None, str | None]:
    """(TensorRT version, None), or (None, why not) where `import tensorrt` fails."""
    try:
        import tensorrt
    except ImportError:
        return None, "TensorRT is not installed"
    except OSError as err:  # the wheel is there but libnvinfer or CUDA does not load
        return None, f"TensorRT is installed but does not load ({err})"
    return str(tensorrt.__version__), None


def package_version(distribution: str) -> str | None:
    """The installed version of a Python distribution ("openvino"), None where it is not
    installed; read from its metadata, so nothing is imported."""
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def precision_cpu_flags(flags: Iterable[str]) -> frozenset[str]:
    """Of a CPU's `flags`, those some precision's CPU kernels need (`PrecisionSpec.cpu_flags`):
    e.g. {"avx512_bf16"} of an AMD Zen 4's hundred-odd flags."""
    wanted = frozenset().union(*(spec.cpu_flags for spec in PRECISIONS.values()))
    return wanted & frozenset(flags)


def _cpuinfo_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> tuple[frozenset[str], str | None]:
    """The x86 flags of the first processor in `cpuinfo`, and a note where it cannot be read."""
    try:
        text = cpuinfo.read_text()
    except OSError as err:
        return frozenset(), f"CPU flags unknown ({cpuinfo} unreadable: {err.strerror})"
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "flags":
            return frozenset(value.split()), None
    return frozenset(), None  # not x86 (ARM names "Features"): no flag a precision reads


def cpu_capabilities() -> dict[str, Any]:
    """The CPU side of `HostCapabilities` (its OpenVINO and NNCF versions, its precision
    flags), as keyword arguments, with any notes under "notes"."""
    flags, note = _cpuinfo_flags()
    return {"openvino_version": package_version("openvino"),
            "nncf_version": package_version("nncf"),
            "cpu_flags": precision_cpu_flags(flags),
            "notes": () if note is None else (note,)}


def detect_capabilities(
    *, nvidia_smi: str = "nvidia-smi", environ: dict[str, str] | None = None
) -> HostCapabilities:
    """What this process can build on: visible GPUs, the TensorRT version, and why anything is missing.

    Never raises for a missing GPU, driver or TensorRT; those become notes.
    """
    env = os.environ if environ is None else environ
    all_gpus, notes = detect_gpus(nvidia_smi)
    gpus = visible_gpus(all_gpus, env.get("CUDA_VISIBLE_DEVICES"))
    extra = list(notes)
    if all_gpus and not gpus:
        extra.append(
            f"CUDA_VISIBLE_DEVICES={env.get('CUDA_VISIBLE_DEVICES')!r} hides all "
            f"{len(all_gpus)} GPU(s)"
        )
    version, trt_note = tensorrt_version()
    if trt_note is not None and trt_note != "TensorRT is not installed":
        extra.append(trt_note)
    cpu = cpu_capabilities()
    return HostCapabilities(gpus=gpus, tensorrt_version=version,
                            notes=(*extra, *cpu.pop("notes")), **cpu)
