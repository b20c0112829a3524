"""Write the int8 graph of a fused fp32 model: static (from a calibration table) or dynamic.

Both go through ONNX Runtime's quantizer, the one its kernels are written against, in QDQ form:
QuantizeLinear/DequantizeLinear pairs around each quantized op, which ONNX Runtime fuses into
integer kernels (QLinearConv, QGemm, ...) at load and TensorRT reads as explicit quantization.
Each flavour (optimizer/registries/quantization.py) sets the types and symmetry; weights are
per channel unless asked otherwise. The model must already be at its Q/DQ opset
(`qdq_opset.at_qdq_opset`) and, for static, be the graph the table was computed on.

A flavour whose quantizer calibrates itself (`FlavourSpec.quantizer`)
is written by that quantizer from the calibration samples (`quantize_self_calibrated`), loaded by
its dotted path so that importing this module loads no backend's library.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import onnx

from optimizer.errors import InternalError, QuantizationError
from optimizer.quantization.calibration import CalibrationTable, graph_sha256, ort_method
from optimizer.quantization.fp8 import int8_to_fp8
from optimizer.registries.backends import load_dotted
from optimizer.registries.quantization import FLAVOURS, QuantFlavour

__all__ = ["DYNAMIC_OP_TYPES", "SelfCalibratingQuantizer", "quantize_dynamic_model",
           "quantize_self_calibrated", "quantize_static_model", "static_op_types"]

# Dynamic quantization computes activation scales at run time; only matrix products gain from
# it on CPU (dynamic ConvInteger ran convnets 5-11x slower than fp32 here).
DYNAMIC_OP_TYPES = ("MatMul", "Gemm", "Attention")


def quantize_static_model(model: onnx.ModelProto, table: CalibrationTable, flavour: QuantFlavour,
                          *, per_channel: bool = True, exclude_nodes: Collection[str] = (),
                          exclude_op_types: Collection[str] = ()) -> onnx.ModelProto:
    """`model` in QDQ form with the activation scales `table` gives, in `flavour`; the nodes
    and op types excluded stay in float.

    Raises:
        QuantizationError: `table` was computed on another graph, or the quantizer failed.
    """
    if table.graph_sha256 != graph_sha256(model):
        raise QuantizationError(
            "the calibration table was computed on another graph than the one quantized "
            f"({table.graph_sha256[:12]} vs {graph_sha256(model)[:12]}); calibrate this graph")
    spec = FLAVOURS[flavour]
    if spec.rescaled_from is not None:  # the symmetric int8 graph, rescaled
        return int8_to_fp8(quantize_static_model(
            model, table, spec.rescaled_from, per_channel=per_channel,
            exclude_nodes=exclude_nodes, exclude_op_types=exclude_op_types))
    from onnxruntime.quantization import QuantFormat, quantize_static  # noqa: PLC0415

    extra: dict[str, Any] = {"ActivationSymmetric": spec.symmetric_activations,
                             "WeightSymmetric": True}
    if spec.weights_behind_qdq:
        # Explicit quantization (TensorRT's): float weights behind their own Q/DQ pair, one pair
        # per consumer so each layer's scales are its own, and biases left in float (TensorRT
        # quantizes only int8/fp8 tensors and folds the bias into the layer itself).
        extra |= {"AddQDQPairToWeight": True, "DedicatedQDQPair": True, "QuantizeBias": False}
    with tempfile.TemporaryDirectory(prefix="fuseforge-quantize-") as tmp:
        cache = table.write(Path(tmp) / "calibration.json")
        output = Path(tmp) / "model.int8.onnx"
        _quietly(quantize_static, model, output, calibration_data_reader=None,
                 quant_format=QuantFormat.QDQ, per_channel=per_channel, reduce_range=False,
                 activation_type=_quant_type(spec.activations), weight_type=_quant_type("int8"),
                 nodes_to_exclude=list(exclude_nodes),
                 op_types_to_quantize=_op_types(exclude_op_types),
                 calibrate_method=ort_method(table.method), extra_options=extra,
                 calibration_cache_path=cache)
        return onnx.load(output)


class SelfCalibratingQuantizer(Protocol):
    """A flavour's own quantizer (`FlavourSpec.quantizer`): the Q/DQ form of `model` from
    statistics it gathers on `feeds`, the nodes and op types excluded left in float."""

    def __call__(self, model: onnx.ModelProto, feeds: Sequence[Mapping[str, np.ndarray]], *,
                 per_channel: bool, exclude_nodes: Collection[str],
                 exclude_op_types: Collection[str]) -> onnx.ModelProto: ...


def quantize_self_calibrated(model: onnx.ModelProto, feeds: Sequence[Mapping[str, np.ndarray]],
                             flavour: QuantFlavour, *, per_channel: bool = True,
                             exclude_nodes: Collection[str] = (),
                             exclude_op_types: Collection[str] = ()) -> onnx.ModelProto:
    """`model` in QDQ form by `flavour`'s own quantizer, calibrated on `feeds` (the calibration
    samples, held apart from the validation ones).

    Raises:
        InternalError: `flavour` has no quantizer of its own (it is written from a table).
        QuantizationError: no calibration samples, or the quantizer failed.
    """
    path = FLAVOURS[flavour].quantizer
    if path is None:
        raise InternalError(f"flavour {flavour!r} is written from a calibration table "
                            "(quantize_static_model), not by a quantizer of its own")
    if not feeds:
        raise QuantizationError(f"{flavour} quantization needs calibration samples: name a "
                                "calibration dataset (quantization.calibration)")
    quantizer: SelfCalibratingQuantizer = load_dotted(path)
    return quantizer(model, feeds, per_channel=per_channel, exclude_nodes=exclude_nodes,
                     exclude_op_types=exclude_op_types)


def quantize_dynamic_model(model: onnx.ModelProto, *, per_channel: bool = True,
                           exclude_nodes: Collection[str] = (),
                           exclude_op_types: Collection[str] = ()) -> onnx.ModelProto:
    """`model` with int8 weights on its matrix products (DYNAMIC_OP_TYPES) and activation
    scales computed at run time.

    Raises:
        QuantizationError: the quantizer failed.
    """
    from onnxruntime.quantization import quantize_dynamic  # noqa: PLC0415

    op_types = [op for op in DYNAMIC_OP_TYPES if op not in exclude_op_types]
    with tempfile.TemporaryDirectory(prefix="fuseforge-quantize-") as tmp:
        output = Path(tmp) / "model.int8.onnx"
        _quietly(quantize_dynamic, model, output, op_types_to_quantize=op_types,
                 per_channel=per_channel, reduce_range=False, weight_type=_quant_type("int8"),
                 nodes_to_exclude=list(exclude_nodes),
                 extra_options={"MatMulConstBOnly": True})
        return onnx.load(output)


def _quant_type(name: str) -> Any:
    from onnxruntime.quantization import QuantType  # noqa: PLC0415
    return {"uint8": QuantType.QUInt8, "int8": QuantType.QInt8}[name]


def static_op_types() -> frozenset[str]:
    """The op types static quantization rewrites when none are excluded: ONNX Runtime's QDQ
    and QLinear registries (its default for quantize_static)."""
    from onnxruntime.quantization.registry import QDQRegistry, QLinearOpsRegistry  # noqa: PLC0415
    return frozenset(QDQRegistry) | frozenset(QLinearOpsRegistry)


def _op_types(excluded: Collection[str]) -> list[str] | None:
    """Every op type ONNX Runtime's QDQ quantizer handles but the excluded; None: all."""
    if not excluded:
        return None
    return sorted(static_op_types() - set(excluded))


def _quietly(quantize: Any, model: onnx.ModelProto, output: Path, **arguments: Any) -> None:
    """Run one of ONNX Runtime's quantizers; its advice to pre-process goes to debug (the fused
    model is already shape-inferred and optimized) and its failures become QuantizationError."""
    quantizer_log = logging.getLogger()
    level = quantizer_log.level
    quantizer_log.setLevel(max(level, logging.ERROR))
    try:
        quantize(model, output, **arguments)
    except Exception as err:  # ONNX Runtime's errors share no base class below Exception
        raise QuantizationError(f"ONNX Runtime's quantizer failed: {type(err).__name__}: "
                                f"{err}") from err
    finally:
        quantizer_log.setLevel(level)
