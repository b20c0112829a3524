"""Write the int8 Q/DQ graph of a fused fp32 model with NNCF's post-training quantization.

NNCF's ONNX backend collects its own activation statistics from the calibration samples (no
ONNX Runtime calibration table), places QuantizeLinear/DequantizeLinear where OpenVINO's CPU
plugin has int8 kernels, with its CPU defaults (symmetric scales, per-channel int8 weights,
fast bias correction), and returns an ONNX model: OpenVINO reads it and its low-precision
transformations turn each Q/DQ group into a u8/i8 kernel. The nodes and op types to keep in
float go to NNCF's ignored scope, unvalidated: a name the quantizer never saw (a Relu fused
away) is not an error.

NNCF's ONNX backend reads a Gemm's C input as a constant bias, and its bias correction fails
where C is computed (a residual Add that FuseForge's MatMul+Add fusion folded into the Gemm):
such a Gemm is split back into Gemm + Add first (OpenVINO fuses the Add again when it compiles).
Where bias correction still fails, NNCF quantizes again without it. The model must be at its
Q/DQ opset (`qdq_opset.at_qdq_opset`).
"""

from __future__ import annotations

import contextlib
import io
import logging
from collections.abc import Collection, Mapping, Sequence

import numpy as np
import onnx

from optimizer.errors import QuantizationError

__all__ = ["computed_c_split", "quantize_with_nncf"]


def quantize_with_nncf(model: onnx.ModelProto, feeds: Sequence[Mapping[str, np.ndarray]], *,
                       per_channel: bool = True, exclude_nodes: Collection[str] = (),
                       exclude_op_types: Collection[str] = ()) -> onnx.ModelProto:
    """`model` in Q/DQ form by `nncf.quantize` on all of `feeds` (the calibration samples), the
    nodes and op types excluded left in float; per-tensor weights where `per_channel` is False.

    Raises:
        QuantizationError: no calibration samples, or NNCF failed.
    """
    if not feeds:
        raise QuantizationError("NNCF's quantization needs calibration samples: name a "
                                "calibration dataset (quantization.calibration)")
    import nncf  # noqa: PLC0415  (heavy: loaded by the jobs that quantize for OpenVINO only)
    from nncf.common.logging.logger import nncf_logger  # noqa: PLC0415
    from nncf.quantization.advanced_parameters import (  # noqa: PLC0415
        AdvancedQuantizationParameters,
        QuantizationParameters,
    )

    model = computed_c_split(model)
    copy = onnx.ModelProto()
    copy.CopyFrom(model)  # NNCF edits what it is given
    inputs = {value.name for value in model.graph.input}
    dataset = nncf.Dataset([{name: np.asarray(value) for name, value in feed.items()
                             if name in inputs} for feed in feeds])
    # None: NNCF's own (per-channel on CPU).
    weights = None if per_channel else QuantizationParameters(per_channel=False)
    scope = nncf.IgnoredScope(names=list(exclude_nodes), types=list(exclude_op_types),
                              validate=False)
    level = nncf_logger.level
    nncf_logger.setLevel(logging.ERROR)  # its notes on each node it leaves are not ours
    try:
        first: Exception | None = None
        for bias_correction in (True, False):
            advanced = AdvancedQuantizationParameters(
                weights_quantization_params=weights,
                disable_bias_correction=not bias_correction)
            try:
                # Its progress bars write to stdout: not a worker's log.
                with contextlib.redirect_stdout(io.StringIO()):
                    quantized = nncf.quantize(copy, dataset, subset_size=len(feeds),
                                              target_device=nncf.TargetDevice.CPU,
                                              ignored_scope=scope,
                                              advanced_parameters=advanced)
                break
            except Exception as err:  # NNCF's errors share no base class below Exception
                first = first or err
                copy.CopyFrom(model)  # whatever the failed run left
        else:
            assert first is not None
            raise QuantizationError(f"NNCF's quantization failed: {type(first).__name__}: "
                                    f"{first}") from first
    finally:
        nncf_logger.setLevel(level)
    if not isinstance(quantized, onnx.ModelProto):
        raise QuantizationError(f"NNCF returned a {type(quantized).__name__}, not an ONNX model")
    return quantized


def computed_c_split(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model` with each Gemm whose C input is computed (not an initializer), at beta 1, split
    into a Gemm without C and an Add of C after it; `model` itself where there is none."""
    constants = {init.name for init in model.graph.initializer}
    split = [index for index, node in enumerate(model.graph.node)
             if node.op_type == "Gemm" and len(node.input) == 3 and node.input[2]
             and node.input[2] not in constants and _beta(node) == 1.0]
    if not split:
        return model
    result = onnx.ModelProto()
    result.CopyFrom(model)
    nodes = list(result.graph.node)
    for index in reversed(split):
        gemm = nodes[index]
        addend, output = gemm.input[2], gemm.output[0]
        product = f"{output}/gemm_without_c"
        del gemm.input[2]
        gemm.output[0] = product
        nodes.insert(index + 1, onnx.helper.make_node(
            "Add", [product, addend], [output], name=f"{gemm.name}/add_c"))
    del result.graph.node[:]
    result.graph.node.extend(nodes)
    return result


def _beta(node: onnx.NodeProto) -> float:
    return next((attribute.f for attribute in node.attribute if attribute.name == "beta"), 1.0)
