"""The words of INT8 quantization, declared once: how a job quantizes, how it calibrates, and
the flavours of Q/DQ graph each backend runs.

Standard library only, as the other registries: the job config and the CLI's --help read it
without loading onnx or onnxruntime.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType

__all__ = ["CALIBRATION_METHODS_TRIED", "DEFAULT_FLAVOURS", "FLAVOURS", "CalibrationMethod",
           "FlavourSpec", "QuantFlavour", "QuantizationMode"]


class QuantizationMode(StrEnum):
    """`static`: weights and activations in int8, activation scales from a calibration dataset;
    `dynamic`: int8 weights, activation scales computed at run time (MatMul/Gemm only: dynamic
    convolutions run several times slower than fp32 on CPU); `auto`: both where possible,
    measured, the fastest within the accuracy budget shipped."""

    STATIC = "static"
    DYNAMIC = "dynamic"
    AUTO = "auto"


class CalibrationMethod(StrEnum):
    """How activation ranges are taken from the calibration samples: `minmax` the observed
    range, `entropy` the range minimising the KL divergence of the histogram, `percentile` the
    99.999th percentile of |x|; `auto` tries them in that order until the budget is met."""

    MINMAX = "minmax"
    ENTROPY = "entropy"
    PERCENTILE = "percentile"
    AUTO = "auto"


# The order `auto` tries methods in: the cheapest (one pass, no histograms) first.
CALIBRATION_METHODS_TRIED = (CalibrationMethod.MINMAX, CalibrationMethod.PERCENTILE,
                             CalibrationMethod.ENTROPY)


class QuantFlavour(StrEnum):
    """The Q/DQ graph a backend runs fastest, all written from one calibration."""

    ORT_U8S8 = "onnxruntime-u8s8"
    ORT_S8S8 = "onnxruntime-s8s8"
    TENSORRT = "tensorrt-s8s8-symmetric"
    TENSORRT_FP8 = "tensorrt-fp8-e4m3"
    OPENVINO_NNCF = "openvino-nncf"


@dataclass(frozen=True)
class FlavourSpec:
    name: QuantFlavour
    activations: str  # the ONNX type of quantized activations: "uint8" or "int8"
    symmetric_activations: bool  # zero point 0 (TensorRT reads only that)
    why: str
    # Weights stay float behind a Q/DQ pair of their own, one pair per consumer, and biases stay
    # float: explicit quantization as a builder that folds the scales itself reads it.
    weights_behind_qdq: bool = field(kw_only=True, default=False)
    # Written as this (symmetric int8) flavour, then rescaled to the float8 type of
    # `activations` (optimizer/quantization/fp8.py); None: written directly.
    rescaled_from: QuantFlavour | None = field(kw_only=True, default=None)
    # "module:function" writing its Q/DQ graph from the calibration samples themselves
    # (optimizer/quantization/quantize.py's `SelfCalibratingQuantizer`), imported on first
    # use; None: ONNX Runtime's quantizer writes it from a calibration table.
    quantizer: str | None = field(kw_only=True, default=None)
    # Whether ONNX Runtime's dynamic form (int8 weights, activation scales at run time) is
    # tried beside it: the runtime of its backend has integer kernels for that form.
    runs_dynamic_form: bool = field(kw_only=True, default=True)

    @property
    def calibrates_itself(self) -> bool:
        """Whether its quantizer takes the calibration samples (and collects its own
        statistics) rather than a calibration table of a `CalibrationMethod`."""
        return self.quantizer is not None


FLAVOURS: Mapping[QuantFlavour, FlavourSpec] = MappingProxyType({
    QuantFlavour.ORT_U8S8: FlavourSpec(
        QuantFlavour.ORT_U8S8, "uint8", False,
        "uint8 activations and int8 weights: the pair ONNX Runtime's VNNI kernels take (ResNet-50 "
        "ran at 0.30x fp32 here, where int8 activations ran at 0.79x)"),
    QuantFlavour.ORT_S8S8: FlavourSpec(
        QuantFlavour.ORT_S8S8, "int8", False,
        "int8 activations and weights: ONNX Runtime's default, faster on CPUs whose integer "
        "dot products take signed pairs (ARM; x86 without VNNI sometimes)"),
    QuantFlavour.TENSORRT: FlavourSpec(
        QuantFlavour.TENSORRT, "int8", True,
        "int8 activations and weights, symmetric (zero point 0), Q/DQ on weights: the explicit "
        "quantization TensorRT 10 and 11 build from (they have no implicit INT8 calibration)",
        weights_behind_qdq=True),
    QuantFlavour.TENSORRT_FP8: FlavourSpec(
        QuantFlavour.TENSORRT_FP8, "float8e4m3fn", True,
        "float8 e4m3 activations and weights, zero point 0, from the symmetric int8 flavour's "
        "scales rescaled by 127/448 (optimizer/quantization/fp8.py): TensorRT on compute "
        "capability 8.9 and later", rescaled_from=QuantFlavour.TENSORRT),
    QuantFlavour.OPENVINO_NNCF: FlavourSpec(
        QuantFlavour.OPENVINO_NNCF, "uint8", True,
        "NNCF's post-training quantization, its CPU defaults (symmetric scales, uint8 after "
        "non-negative activations and int8 elsewhere, per-channel int8 weights, Q/DQ where "
        "OpenVINO's CPU plugin has int8 kernels, fast bias correction) from its own statistics "
        "of the calibration samples: the Q/DQ graph OpenVINO's low-precision transformations "
        "turn into u8/i8 kernels",
        quantizer="optimizer.backends.openvino.nncf_quantize:quantize_with_nncf",
        # OpenVINO runs MatMulInteger/DynamicQuantizeLinear as f32 layers plus conversions.
        runs_dynamic_form=False),
})

# The flavours a library call quantizes in when its caller names no backend's
# (`QuantizationRequest`: the CLI's local int8, the benches): ONNX Runtime's on this CPU.
DEFAULT_FLAVOURS = (QuantFlavour.ORT_U8S8, QuantFlavour.ORT_S8S8)
