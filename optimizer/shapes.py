"""Turn a model's dynamic input shapes into the concrete shapes an engine is built for."""

from __future__ import annotations

import numbers
from collections.abc import Mapping, Sequence

import onnx

from optimizer.errors import InputShapeError, InvalidModelError
from optimizer.tensor_specs import Dim, TensorSpec, summarize_model

__all__ = ["fix_input_shapes", "resolve_input_shapes"]

# Dynamic dims nobody asked about become 1: the smallest shape every model accepts.
DEFAULT_DYNAMIC_DIM = 1


def resolve_input_shapes(
    inputs: Sequence[TensorSpec],
    requested: Mapping[str, Sequence[int]] | None,
) -> dict[str, tuple[int, ...]]:
    """Give every model input a concrete shape.

    Requested dims win where given; fixed dims are kept; other dynamic dims become 1. Needs
    only the specs (e.g. rebuilt from JSON), not the model.

    >>> spec = TensorSpec("input", "float32", ("N", 3, 32, 32))
    >>> resolve_input_shapes([spec], {"input": [8, 3, 32, 32]})
    {'input': (8, 3, 32, 32)}

    Raises:
        InputShapeError: a requested name is not an input, a requested shape has the wrong
            rank, a dim is not a positive integer, or a requested dim contradicts a fixed one.
    """
    requested = requested or {}
    by_name = {spec.name: spec for spec in inputs}
    for name in requested:
        if name not in by_name:
            known = ", ".join(repr(spec.name) for spec in inputs) or "none"
            raise InputShapeError(
                f"A shape was requested for input {name!r}, but the model has no input of that "
                f"name; its inputs are: {known}.", input_name=name)
    return {spec.name: _resolve_one(spec, requested.get(spec.name)) for spec in inputs}


def fix_input_shapes(
    model: onnx.ModelProto, shapes: Mapping[str, Sequence[int]]
) -> onnx.ModelProto:
    """Return a copy of `model` whose inputs have static shapes, with shapes inferred throughout.

    `shapes` is resolved as in `resolve_input_shapes`, so inputs it leaves out get their
    defaults. Intermediate and output shapes recorded by the exporter are dropped first, so
    inference recomputes them for the new shapes instead of trusting a stale batch size or a
    wrong declaration.

    Raises:
        InputShapeError: as `resolve_input_shapes`.
        InvalidModelError: ONNX shape inference fails for these shapes (message included).
    """
    resolved = resolve_input_shapes(summarize_model(model).inputs, shapes)
    fixed = onnx.ModelProto()
    fixed.CopyFrom(model)
    graph = fixed.graph
    for value in graph.input:
        if value.name in resolved:
            _set_dims(value, resolved[value.name])
    del graph.value_info[:]
    for value in graph.output:
        # A declared output shape is the exporter's claim, not a fact: inference recomputes it.
        value.type.tensor_type.ClearField("shape")
    try:
        return onnx.shape_inference.infer_shapes(
            fixed, check_type=True, strict_mode=True, data_prop=True)
    except (onnx.shape_inference.InferenceError, onnx.checker.ValidationError) as err:
        shown = ", ".join(f"{name}={list(shape)}" for name, shape in resolved.items())
        raise InvalidModelError(
            f"ONNX shape inference failed for model {model.graph.name!r} with input shapes "
            f"{shown}: {err}. Check that the model accepts these shapes.") from err


def _resolve_one(spec: TensorSpec, requested: Sequence[int] | None) -> tuple[int, ...]:
    if requested is None:
        return _default_shape(spec.shape)
    try:
        if isinstance(requested, (str, bytes, Mapping)):
            raise TypeError(type(requested).__name__)
        requested = list(requested)  # also takes tuples and numpy arrays
    except TypeError as err:
        raise InputShapeError(
            f"Input {spec.name!r}: requested shape {requested!r} is not a list of dims; give "
            f"{len(spec.shape)} positive integers, e.g. {list(_default_shape(spec.shape))}.",
            input_name=spec.name) from err
    if len(requested) != len(spec.shape):
        raise InputShapeError(
            f"Input {spec.name!r} has rank {len(spec.shape)} (shape {_show(spec.shape)}), but "
            f"the requested shape {list(requested)} has {len(requested)} dims; give "
            f"{len(spec.shape)} dims, e.g. {list(_default_shape(spec.shape))}.",
            input_name=spec.name)
    resolved: list[int] = []
    for axis, (declared, dim) in enumerate(zip(spec.shape, requested, strict=True)):
        # bool is an int subclass, and True would silently mean 1.
        if isinstance(dim, bool) or not isinstance(dim, numbers.Integral) or dim < 1:
            raise InputShapeError(
                f"Input {spec.name!r} axis {axis}: requested dim {dim!r} is not a positive "
                "integer; give a whole number of at least 1.", input_name=spec.name)
        if isinstance(declared, int) and declared != dim:
            raise InputShapeError(
                f"Input {spec.name!r} axis {axis} is fixed at {declared} in the model "
                f"(shape {_show(spec.shape)}), but {dim} was requested; use {declared} there. "
                "Only the dynamic axes can be given other sizes.", input_name=spec.name)
        resolved.append(int(dim))
    return tuple(resolved)


def _set_dims(value: onnx.ValueInfoProto, dims: tuple[int, ...]) -> None:
    shape = value.type.tensor_type.shape
    del shape.dim[:]
    for size in dims:
        shape.dim.add().dim_value = size


def _default_shape(shape: tuple[Dim, ...]) -> tuple[int, ...]:
    return tuple(dim if isinstance(dim, int) else DEFAULT_DYNAMIC_DIM for dim in shape)


def _show(shape: tuple[Dim, ...]) -> str:
    return "[" + ", ".join("?" if dim is None else str(dim) for dim in shape) + "]"
