"""Readers and checks the plugins' ONNX shape-inference functions share.

onnx calls a schema's inference function with an `InferenceContext` whose types are
`TypeProto`s; these helpers read them as plain Python (a dim is an int, a symbolic name, or
None) and raise `InferenceError` with a message that names the node and what is wrong.
"""

from __future__ import annotations

from collections.abc import Sequence

import onnx
from onnx.shape_inference import InferenceContext, InferenceError

from optimizer.plugins.base import AOT, TRT_NAMESPACE

__all__ = [
    "Dim",
    "attribute",
    "check_trt_attributes",
    "fail",
    "input_shape",
    "same_element_type",
    "same_dim",
    "set_output",
]

Dim = int | str | None  # a static size, a symbolic name, or unknown


def fail(ctx: InferenceContext, message: str) -> InferenceError:
    """An error naming the node; raise it."""
    return InferenceError(f"{ctx.get_display_name()}: {message}")


def _tensor_type(ctx: InferenceContext, index: int) -> onnx.TypeProto.Tensor | None:
    if not ctx.has_input(index):
        return None
    type_proto = ctx.get_input_type(index)
    if not isinstance(type_proto, onnx.TypeProto) or not type_proto.HasField("tensor_type"):
        return None
    return type_proto.tensor_type


def input_shape(ctx: InferenceContext, index: int) -> list[Dim] | None:
    """The shape of input `index`, or None when it is absent or its rank is unknown."""
    tensor = _tensor_type(ctx, index)
    if tensor is None or not tensor.HasField("shape"):
        return None
    dims: list[Dim] = []
    for dim in tensor.shape.dim:
        if dim.HasField("dim_value"):
            dims.append(int(dim.dim_value))
        elif dim.HasField("dim_param"):
            dims.append(dim.dim_param)
        else:
            dims.append(None)
    return dims


def same_element_type(ctx: InferenceContext) -> int:
    """The element type every present input shares (0 when none is known).

    Raises:
        InferenceError: two inputs have different element types.
    """
    found = 0
    for index in range(ctx.get_num_inputs()):
        tensor = _tensor_type(ctx, index)
        if tensor is None or tensor.elem_type == 0:
            continue
        if found and tensor.elem_type != found:
            raise fail(ctx, f"input {index} is {onnx.TensorProto.DataType.Name(tensor.elem_type)}"
                            f" but input 0 is {onnx.TensorProto.DataType.Name(found)}; all "
                            "inputs must share one type")
        found = found or tensor.elem_type
    return found


def same_dim(a: Dim, b: Dim) -> bool:
    """False only when both dims are static and differ (symbolic names may stand for any size)."""
    return not (isinstance(a, int) and isinstance(b, int) and a != b)


def attribute(ctx: InferenceContext, name: str) -> float | int | str | None:
    proto = ctx.get_attribute(name)
    if not isinstance(proto, onnx.AttributeProto):
        return None
    value = onnx.helper.get_attribute_value(proto)
    return value.decode() if isinstance(value, bytes) else value


def check_trt_attributes(ctx: InferenceContext) -> None:
    """plugin_namespace and aot must name our creators and their AOT kernels."""
    namespace, aot = attribute(ctx, "plugin_namespace"), attribute(ctx, "aot")
    if namespace != TRT_NAMESPACE:
        raise fail(ctx, f"plugin_namespace is {namespace!r}; the fuseforge plugins are "
                        f"registered under {TRT_NAMESPACE!r}")
    if aot != AOT:
        raise fail(ctx, f"aot is {aot!r}; the fuseforge plugins have only an ahead-of-time "
                        f"implementation (aot={AOT})")


def set_output(ctx: InferenceContext, index: int, elem_type: int,
               shape: Sequence[Dim] | None) -> None:
    """Give output `index` (if the node has it) `elem_type` and `shape` (None: unknown rank)."""
    if index >= ctx.get_num_outputs() or not ctx.has_output(index):
        return
    type_proto = onnx.TypeProto()
    tensor = type_proto.tensor_type
    tensor.elem_type = elem_type
    if shape is not None:
        tensor.shape.SetInParent()
        for dim in shape:
            proto = tensor.shape.dim.add()
            if isinstance(dim, int):
                proto.dim_value = dim
            elif isinstance(dim, str):
                proto.dim_param = dim
    ctx.set_output_type(index, type_proto)
