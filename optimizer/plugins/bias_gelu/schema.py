"""Shape inference of fuseforge.BiasGelu: the output takes the input's type and shape.

bias must be 1-D of the input's last size; approximate must be "none" or "tanh".
"""

from __future__ import annotations

from onnx.shape_inference import InferenceContext

from optimizer.plugins.bias_gelu.reference import APPROXIMATIONS
from optimizer.plugins.shape_inference import (
    attribute,
    check_trt_attributes,
    fail,
    input_shape,
    same_dim,
    same_element_type,
    set_output,
)

__all__ = ["infer_shapes"]


def infer_shapes(ctx: InferenceContext) -> None:
    check_trt_attributes(ctx)
    approximate = attribute(ctx, "approximate")
    if approximate not in APPROXIMATIONS:
        raise fail(ctx, f"approximate is {approximate!r}, not one of {list(APPROXIMATIONS)}")
    elem_type = same_element_type(ctx)
    shape, bias = input_shape(ctx, 0), input_shape(ctx, 1)
    if shape is not None and len(shape) < 1:
        raise fail(ctx, "input is a scalar; the bias is added along its last axis")
    if bias is not None and (len(bias) != 1 or not same_dim(bias[0], shape[-1] if shape else None)):
        hidden = shape[-1] if shape else None
        raise fail(ctx, f"bias has shape {bias}, expected [{hidden}] (the input's last size)")
    set_output(ctx, 0, elem_type, shape)
