"""The precisions a job can compute in, each declared once with the facts other layers read.

`Precision` is the vocabulary (job configs, the CLI's and the dashboard's choices); `PRECISIONS`
maps each to its `PrecisionSpec`: the default tolerances validation holds it to
(optimizer/validation/tolerances.py), the ONNX type the conversion step writes
(optimizer/precision/convert.py) and the hardware it needs. Which backends run a precision is
the backend's fact (`BackendSpec.precisions` in optimizer/registries/backends.py).

Importing this module loads neither numpy nor onnx (the CLI's --help reads it).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType

from optimizer.registries.plug_ins import add_registered, remove_registered

__all__ = ["PRECISIONS", "REFERENCE_PRECISION", "Precision", "PrecisionSpec", "is_quantized",
           "reduced_precisions", "register_precision", "unregister_precision"]


class Precision(StrEnum):
    FP32 = "fp32"
    FP16 = "fp16"
    BF16 = "bf16"
    INT8 = "int8"
    FP8 = "fp8"

    @classmethod
    def _missing_(cls, value: object) -> Precision | None:
        # A precision a plug-in registered (`register_precision`): its name is no member above.
        return next((name for name in PRECISIONS if name == value), None)


@dataclass(frozen=True)
class PrecisionSpec:
    """One precision: how close its outputs must stay to fp32, and how the graph gets there."""

    name: Precision
    label: str
    # The default limits (optimizer.validation.Tolerances fields); a job's validation overrides them.
    tolerances: Mapping[str, float]
    # The ONNX element type `convert_precision` rewrites the graph to; None: the model runs as
    # exported (no conversion, outputs compared one for one).
    onnx_type: str | None
    hardware: str  # where it runs at speed, for the API and the docs
    # How faithful to fp32 its outputs are, higher the closer: a search's tie goes to the most
    # faithful precision (optimizer/search/decision.py). Gaps leave room for new precisions.
    fidelity: int = field(kw_only=True)
    # Integer precisions are reached by quantization (optimizer/quantization), not conversion:
    # a Q/DQ graph from calibrated scales, judged on the backend that runs it.
    quantizes: bool = False
    # A quantized precision whose activation scales can also be computed at run time
    # (QuantizationMode.DYNAMIC: weights quantized, no calibration dataset). False: its scales
    # come only from calibration, so a job or search on it needs a calibration dataset.
    has_dynamic_form: bool = field(kw_only=True, default=False)
    # The oldest NVIDIA compute capability with kernels for it ("8.0"); None: any.
    min_compute_capability: str | None = None
    # The CPU flags (as /proc/cpuinfo names them) any one of which gives a CPU backend native
    # kernels for it; empty: any CPU. A CPU backend on a host with none refuses it (`cpu_refusal`).
    cpu_flags: frozenset[str] = field(kw_only=True, default=frozenset())
    cpu_hardware: str = field(kw_only=True, default="any CPU")  # the CPUs with `cpu_flags`, in words

    def gpu_refusal(self, compute_capability: str | None) -> str | None:
        """Why a GPU of `compute_capability` ("major.minor") cannot run this precision, or
        None if it can (or its capability is unknown: the build then says)."""
        if self.min_compute_capability is None or compute_capability is None:
            return None
        if _cc_key(compute_capability) >= _cc_key(self.min_compute_capability):
            return None
        return (f"{self.name} needs compute capability {self.min_compute_capability} or later "
                f"({self.hardware}); this GPU has {compute_capability}")

    def cpu_refusal(self, flags: frozenset[str]) -> str | None:
        """Why a CPU with `flags` cannot run this precision on a CPU backend, or None if it can."""
        if not self.cpu_flags or self.cpu_flags & flags:
            return None
        return (f"{self.name} needs a CPU with {' or '.join(sorted(self.cpu_flags))} "
                f"({self.cpu_hardware}); this worker's CPU has none of them")

    @property
    def converts(self) -> bool:
        """Whether the optimize stage converts the graph's float type to this precision."""
        return self.onnx_type is not None

    @property
    def needs_calibration(self) -> bool:
        """Whether every engine of this precision takes its scales from a calibration dataset
        (a quantized precision with no dynamic form)."""
        return self.quantizes and not self.has_dynamic_form

    @property
    def rewrites(self) -> bool:
        """Whether the engine computes at another precision than the upload: it is judged by
        the precision's limits and never bisected by fusion rule."""
        return self.converts or self.quantizes


# The precision engines are judged against, and that needs no conversion.
REFERENCE_PRECISION = Precision.FP32

PRECISIONS: Mapping[Precision, PrecisionSpec] = MappingProxyType({
    Precision.FP32: PrecisionSpec(
        Precision.FP32, "float32", {"atol": 1e-4, "rtol": 1e-3, "min_cosine": 0.9999},
        onnx_type=None, hardware="any CPU or GPU", fidelity=100),
    Precision.FP16: PrecisionSpec(
        Precision.FP16, "float16", {"atol": 1e-2, "rtol": 1e-2, "min_cosine": 0.999},
        onnx_type="FLOAT16", hardware="NVIDIA GPUs (tensor cores from compute capability 7.0); "
        "CPUs run it emulated or slowly", fidelity=70),
    # Elementwise limits do not bind: after dozens of layers at 8 significant bits a value
    # on a sigmoid's slope moves by up to 0.6 (PP-OCR's detectors, at cosine 0.9998 on text
    # pages); the cosine, tighter than int8's, and the top-1 agreement of class scores judge it.
    Precision.BF16: PrecisionSpec(
        Precision.BF16, "bfloat16",
        {"atol": math.inf, "rtol": 0.0, "min_cosine": 0.995, "min_top1_agreement": 0.99},
        onnx_type="BFLOAT16", hardware="NVIDIA GPUs of compute capability 8.0 or later; "
        "CPUs with AVX512_BF16 or AMX (OpenVINO)",
        min_compute_capability="8.0", fidelity=80,
        cpu_flags=frozenset({"avx512_bf16", "amx_bf16"}),
        cpu_hardware="AMD Zen 4, Intel Cooper Lake, Sapphire Rapids and later"),
    # Elementwise limits do not bind: int8 moves every value by up to half a scale step; the
    # cosine and the top-1 agreement of class scores judge it.
    Precision.INT8: PrecisionSpec(
        Precision.INT8, "int8 (calibrated Q/DQ)",
        {"atol": math.inf, "rtol": 0.0, "min_cosine": 0.99, "min_top1_agreement": 0.99},
        onnx_type=None, quantizes=True, has_dynamic_form=True,
        hardware="CPUs with 8-bit dot products (x86 VNNI, ARM dot-product); NVIDIA GPUs "
        "(TensorRT explicit quantization)", fidelity=40),
    # float8 e4m3: the same calibration as int8's symmetric flavour, rescaled (3 mantissa bits:
    # a little less exact than calibrated int8, with a wider dynamic range).
    Precision.FP8: PrecisionSpec(
        Precision.FP8, "float8 e4m3 (calibrated Q/DQ)",
        {"atol": math.inf, "rtol": 0.0, "min_cosine": 0.99, "min_top1_agreement": 0.99},
        onnx_type=None, quantizes=True, min_compute_capability="8.9",
        hardware="NVIDIA GPUs of compute capability 8.9 or later (Ada, Hopper and newer)",
        fidelity=30),
})

# PRECISIONS is a read-only view of this dict: a precision `register_precision` adds is seen by
# every module that imported PRECISIONS, and no reader can change it.
_REGISTERED: dict[Precision, PrecisionSpec] = dict(PRECISIONS)
PRECISIONS = MappingProxyType(_REGISTERED)


def register_precision(spec: PrecisionSpec) -> None:
    """Add a precision declared outside this module: a plug-in's, named by
    `plug_in_member(Precision, "...")` (optimizer/registries/plug_ins.py); the backends that
    run it list it in their specs. Registering an equal spec again does nothing.

    Raises:
        ValueError: another spec has that name.
    """
    add_registered(_REGISTERED, spec.name, spec, "precision", same=operator.eq)


def unregister_precision(name: Precision) -> None:
    """Remove a precision `register_precision` added (a test's stand-in, when the test ends).

    Raises:
        ValueError: `name` is one of `Precision`'s own members, or was not registered.
    """
    remove_registered(_REGISTERED, name, "precision")


def _cc_key(compute_capability: str) -> tuple[int, ...]:
    return tuple(int(part) for part in compute_capability.split("."))


def reduced_precisions() -> tuple[Precision, ...]:
    """The precisions the optimize stage converts to (what `precision_search` can search)."""
    return tuple(p for p, spec in PRECISIONS.items() if spec.converts)


def is_quantized(name: str) -> bool:
    """Whether the precision called `name` (as a stored job or the wire says it) is reached by
    quantization; False for a name this version does not know."""
    return any(precision == name and spec.quantizes for precision, spec in PRECISIONS.items())
