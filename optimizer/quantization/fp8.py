"""FP8 (float8 e4m3) Q/DQ from the symmetric int8 one: the same calibration, rescaled.

A symmetric int8 pair with scale s represents [-127 s, 127 s] with zero point 0; float8 e4m3's
largest finite value is 448, so the same range is scale 127 s / 448 with a float8 zero point
of 0. Converting the TensorRT flavour's graph this way keeps every scale FuseForge calibrated
(activation ranges and per-channel weight ranges) instead of ONNX Runtime's float8 path, whose
Distribution-based scales turned a conv stack's outputs around (cosine -0.4 here). Float8
QuantizeLinear/DequantizeLinear need opset 19.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx.version_converter
from onnx import TensorProto, numpy_helper

from optimizer.errors import QuantizationError
from optimizer.quantization.qdq_opset import default_opset

__all__ = ["FP8_OPSET", "FP8_MAX", "int8_to_fp8"]

FP8_OPSET = 19
FP8_MAX = 448.0  # float8 e4m3fn's largest finite value
_INT8_MAX = 127.0
_QDQ = ("QuantizeLinear", "DequantizeLinear")


def int8_to_fp8(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model` (symmetric int8 Q/DQ: every zero point 0) with float8 e4m3 Q/DQ instead.

    Raises:
        QuantizationError: a Q/DQ pair is not symmetric int8, or the opset cannot reach 19.
    """
    if default_opset(model) < FP8_OPSET:
        try:
            model = onnx.version_converter.convert_version(model, FP8_OPSET)
        except Exception as err:  # the converter raises RuntimeError and ValueError alike
            raise QuantizationError(f"fp8 Q/DQ needs opset {FP8_OPSET}; onnx.version_converter "
                                    f"could not convert the model: {err}") from err
    weights = {init.name: init for init in model.graph.initializer}
    rescaled: set[str] = set()
    for node in model.graph.node:
        if node.op_type not in _QDQ or len(node.input) < 3:
            continue
        scale, zero_point = weights.get(node.input[1]), weights.get(node.input[2])
        if scale is None or zero_point is None:
            raise QuantizationError(f"{node.op_type} {node.name!r}: its scale and zero point "
                                    "are not constants; fp8 is written from constant scales")
        if zero_point.name in rescaled:  # shared by a pair: converted with the first of it
            continue
        if zero_point.data_type != TensorProto.INT8 or numpy_helper.to_array(zero_point).any():
            raise QuantizationError(f"{node.op_type} {node.name!r} is not symmetric int8; fp8 "
                                    "is written from the symmetric (TensorRT) flavour")
        if scale.name not in rescaled:
            values = numpy_helper.to_array(scale).astype(np.float32) * (_INT8_MAX / FP8_MAX)
            scale.CopyFrom(numpy_helper.from_array(values, scale.name))
            rescaled.add(scale.name)
        dims = list(zero_point.dims)
        zero_point.CopyFrom(onnx.helper.make_tensor(
            zero_point.name, TensorProto.FLOAT8E4M3FN, dims,
            [0.0] * int(np.prod(dims, dtype=np.int64))))
        rescaled.add(zero_point.name)
    quantized = {node.output[0] for node in model.graph.node if node.op_type == "QuantizeLinear"}
    for value in (*model.graph.value_info, *model.graph.output):
        if value.name in quantized:  # the types shape inference wrote for the int8 graph
            value.type.tensor_type.elem_type = TensorProto.FLOAT8E4M3FN
    model.ir_version = max(model.ir_version, 9)  # float8 types are IR 9
    return model
