"""Bring a model to the opset its Q/DQ graph needs before it is quantized.

Per-axis (per-channel) DequantizeLinear, the form int8 weights take, has an `axis` attribute
only from opset 13. ONNX Runtime's quantizer writes it into models of any opset, so on an
opset-12 export (Paddle2ONNX's detectors) it wrote a model that does not load ("Unrecognized
attribute: axis for operator DequantizeLinear"). The whole model is converted first, with
onnx.version_converter, so every node stays valid at the new opset.
"""

from __future__ import annotations

import onnx
import onnx.version_converter

from optimizer.errors import QuantizationError

__all__ = ["QDQ_OPSET", "at_qdq_opset"]

QDQ_OPSET = 13  # per-axis DequantizeLinear
_QDQ_IR_VERSION = 7  # the IR version opset 13 needs


def at_qdq_opset(model: onnx.ModelProto) -> tuple[onnx.ModelProto, str | None]:
    """`model` at opset QDQ_OPSET or later, and a note when it was converted (None: as given).

    Raises:
        QuantizationError: onnx.version_converter cannot convert it.
    """
    opset = default_opset(model)
    if opset >= QDQ_OPSET:
        return model, None
    try:
        converted = onnx.version_converter.convert_version(model, QDQ_OPSET)
    except Exception as err:  # the converter raises RuntimeError and ValueError alike
        first_line = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise QuantizationError(
            f"the model is at opset {opset}; per-channel int8 weights need opset {QDQ_OPSET} "
            f"(DequantizeLinear's axis) and onnx.version_converter could not convert it: "
            f"{first_line}") from err
    converted = _without_initializer_inputs(converted)  # after: the converter reads them
    converted.ir_version = max(converted.ir_version, _QDQ_IR_VERSION)
    return converted, (f"converted from opset {opset} to {QDQ_OPSET} (onnx.version_converter): "
                       f"per-channel DequantizeLinear needs {QDQ_OPSET}")


def _without_initializer_inputs(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy whose graph inputs are only the real inputs: before IR 4 every initializer was
    listed as an input too, which from IR 4 on makes it an input a caller may override (so
    never constant, and the quantizer's scales would sit beside overridable weights)."""
    weights = {init.name for init in model.graph.initializer}
    if not any(value.name in weights for value in model.graph.input):
        return model
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    real = [value for value in copy.graph.input if value.name not in weights]
    del copy.graph.input[:]
    copy.graph.input.extend(real)
    return copy


def default_opset(model: onnx.ModelProto) -> int:
    """The model's ai.onnx opset version."""
    return next((entry.version for entry in model.opset_import
                 if entry.domain in ("", "ai.onnx")), 1)
