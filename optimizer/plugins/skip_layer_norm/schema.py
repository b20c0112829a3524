"""Shape inference of fuseforge.SkipLayerNorm: both outputs take the input's type and shape.

input and skip must have the same shape (no broadcasting: the kernel reads them row by row);
gamma, beta and bias must be 1-D of the hidden (last) size.
"""

from __future__ import annotations

from onnx.shape_inference import InferenceContext

from optimizer.plugins.shape_inference import (
    check_trt_attributes,
    fail,
    input_shape,
    same_dim,
    same_element_type,
    set_output,
)

__all__ = ["infer_shapes"]

_VECTORS = ((2, "gamma"), (3, "beta"), (4, "bias"))


def infer_shapes(ctx: InferenceContext) -> None:
    check_trt_attributes(ctx)
    elem_type = same_element_type(ctx)
    shape, skip = input_shape(ctx, 0), input_shape(ctx, 1)
    if shape is not None and len(shape) < 1:
        raise fail(ctx, "input is a scalar; SkipLayerNorm normalizes the last axis")
    if shape is not None and skip is not None and (
            len(shape) != len(skip) or not all(map(same_dim, shape, skip))):
        raise fail(ctx, f"input {shape} and skip {skip} differ in shape (skip is not broadcast)")
    known = shape if shape is not None else skip
    hidden = known[-1] if known else None
    for index, name in _VECTORS:
        vector = input_shape(ctx, index)
        if vector is None:
            continue
        if len(vector) != 1 or not same_dim(vector[0], hidden):
            raise fail(ctx, f"{name} has shape {vector}, expected [{hidden}]")
    set_output(ctx, 0, elem_type, known)
    set_output(ctx, 1, elem_type, known)
