"""Turn a model's dynamic input shapes into the concrete shapes an engine is built for.

`fix_input_shapes` fixes every input axis; `fix_input_shapes_except` leaves chosen axes dynamic
(those a TensorRT optimization profile lets vary) and fixes the rest.
"""

from __future__ import annotations

import numbers
from collections.abc import Collection, Mapping, Sequence

import onnx

from optimizer.errors import InputShapeError, InvalidModelError
from optimizer.model.dead_branches import relax_dead_branches
from optimizer.model.graphs import fresh_name
from optimizer.model.tensor_specs import Dim, TensorSpec, summarize_model, unknown_input_message

__all__ = ["fix_input_shapes", "fix_input_shapes_except", "resolve_input_shapes"]

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
            raise InputShapeError(unknown_input_message(
                inputs, f"A shape was requested for input {name!r}"), input_name=name)
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
    return _with_input_dims(model, dict(resolved))


def fix_input_shapes_except(
    model: onnx.ModelProto,
    shapes: Mapping[str, Sequence[int]],
    dynamic_axes: Mapping[str, Collection[int]],
) -> onnx.ModelProto:
    """Return a copy of `model` with its inputs fixed as `fix_input_shapes` does, except the
    `dynamic_axes` (input name -> axes), which stay dynamic; shapes are inferred throughout.

    This is the model a TensorRT engine with optimization profiles is built from: an axis the
    profile lets vary (min != max) must be dynamic (-1) in the network, every other axis fixed.
    A dynamic axis keeps the model's symbolic name, so inputs that share a dim (e.g. "batch" of
    input_ids and attention_mask) stay linked through shape inference; an axis with no name
    gets "<input>_dim<axis>". The size `shapes` gives a dynamic axis is ignored.

    For example, a classifier with input ["N", 3, None, None] and
    ``fix_input_shapes_except(model, {"input": [8, 3, 224, 224]}, {"input": [0]})`` gives input
    ["N", 3, 224, 224] and output ["N", 1000].

    Raises:
        InputShapeError: as `resolve_input_shapes`; a `dynamic_axes` name is not an input, an
            axis is out of range or fixed in the model; or a named dim is left dynamic in one
            input but fixed in another that shares it.
        InvalidModelError: ONNX shape inference fails for these shapes (message included).
    """
    inputs = summarize_model(model).inputs
    resolved = resolve_input_shapes(inputs, shapes)
    by_name = {spec.name: spec for spec in inputs}
    taken = {dim for spec in inputs for dim in spec.shape if isinstance(dim, str)}
    dims: dict[str, tuple[int | str, ...]] = dict(resolved)
    for name, axes in dynamic_axes.items():
        spec = by_name.get(name)
        if spec is None:
            raise InputShapeError(unknown_input_message(
                inputs, f"Axes of input {name!r} were to be left dynamic"), input_name=name)
        row: list[int | str] = list(resolved[name])
        for axis in sorted(set(axes)):
            if not 0 <= axis < len(spec.shape):
                raise InputShapeError(
                    f"Input {name!r} has rank {len(spec.shape)} (shape {_show(spec.shape)}), so "
                    f"axis {axis} cannot be left dynamic; give axes 0 to {len(spec.shape) - 1}.",
                    input_name=name)
            declared = spec.shape[axis]
            if isinstance(declared, int):
                raise InputShapeError(
                    f"Input {name!r} axis {axis} is fixed at {declared} in the model (shape "
                    f"{_show(spec.shape)}), so it cannot be left dynamic; only its dynamic axes "
                    "can take a range of sizes.", input_name=name)
            row[axis] = declared if declared is not None else fresh_name(
                f"{name}_dim{axis}", taken)
        dims[name] = tuple(row)
    _check_shared_dims_agree(inputs, dims)
    return _with_input_dims(model, dims)


def _with_input_dims(
    model: onnx.ModelProto, dims: Mapping[str, tuple[int | str, ...]]
) -> onnx.ModelProto:
    # Sets the input dims (ints fixed, strs symbolic) on a copy and re-infers every shape.
    fixed = onnx.ModelProto()
    fixed.CopyFrom(model)
    graph = fixed.graph
    _drop_initializer_inputs(fixed)
    for value in graph.input:
        if value.name in dims:
            _set_dims(value, dims[value.name])
    _forget_inferred_shapes(graph)
    try:
        inferred = _infer(fixed)
        relaxed, dead = relax_dead_branches(inferred)
        if dead:
            _forget_inferred_shapes(relaxed.graph)  # the relaxed branches' shapes are dynamic now
            inferred = _infer(relaxed)
        _restore_uninferred_outputs(inferred.graph, model.graph)
        return inferred
    except (onnx.shape_inference.InferenceError, onnx.checker.ValidationError) as err:
        shown = ", ".join(f"{name}={_show(shape)}" for name, shape in dims.items())
        raise InvalidModelError(
            f"ONNX shape inference failed for model {model.graph.name!r} with input shapes "
            f"{shown}: {err}. Check that the model accepts these shapes.") from err


def _infer(model: onnx.ModelProto) -> onnx.ModelProto:
    return onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True,
                                             data_prop=True)


def _restore_uninferred_outputs(graph: onnx.GraphProto, declared: onnx.GraphProto) -> None:
    """Give each graph output inference could not shape its declared rank back, every dim
    symbolic: the checker requires a main-graph output's shape, and the exporter's sizes are
    claims for the old inputs (a Reshape whose target is computed, as Paddle2ONNX writes,
    leaves inference nothing to go on)."""
    ranks = {value.name: value.type.tensor_type.shape for value in declared.output
             if value.type.tensor_type.HasField("shape")}
    for value in graph.output:
        tensor = value.type.tensor_type
        if value.type.HasField("tensor_type") and not tensor.HasField("shape") \
                and value.name in ranks:
            for axis, dim in enumerate(ranks[value.name].dim):
                tensor.shape.dim.add().dim_param = dim.dim_param or f"{value.name}_dim{axis}"


def _drop_initializer_inputs(model: onnx.ModelProto) -> None:
    """Weights listed as graph inputs too (IR version 3 required it: the onnx package's zoo
    models, old Caffe2 and early PyTorch exports) are constants of a fixed model: kept as
    inputs, an engine ONNX Runtime writes after folding them asks for them as inputs with no
    value (every zoo model's engine did). From IR 4 on a weight need not be an input."""
    weights = {tensor.name for tensor in model.graph.initializer}
    if not weights & {value.name for value in model.graph.input}:
        return
    kept = [value for value in model.graph.input if value.name not in weights]
    del model.graph.input[:]
    model.graph.input.extend(kept)
    model.ir_version = max(model.ir_version, 4)


def _forget_inferred_shapes(graph: onnx.GraphProto) -> None:
    # Intermediate and output shapes recorded by the exporter (or an earlier inference) are
    # claims for the old input shapes, in every subgraph too (If branches, Loop and Scan
    # bodies): left there, strict inference refuses the new shapes, or a stale branch output
    # contradicts what the new shapes give. Subgraph inputs stay: a Loop or Scan body's inputs
    # declare types that inference needs.
    del graph.value_info[:]
    for value in graph.output:
        if value.type.HasField("tensor_type"):
            value.type.tensor_type.ClearField("shape")
    for node in graph.node:
        for attribute in node.attribute:
            if attribute.HasField("g"):
                _forget_inferred_shapes(attribute.g)
            for subgraph in attribute.graphs:
                _forget_inferred_shapes(subgraph)


def _check_shared_dims_agree(
    inputs: Sequence[TensorSpec], dims: Mapping[str, tuple[int | str, ...]]
) -> None:
    # A named dim shared by several inputs is one size at run time: leaving it dynamic in one
    # input while fixing it in another would build an engine that only runs at the fixed size.
    dynamic: dict[str, tuple[str, int]] = {}
    fixed: dict[str, tuple[str, int]] = {}
    for spec in inputs:
        for axis, (declared, dim) in enumerate(zip(spec.shape, dims[spec.name], strict=True)):
            if isinstance(declared, str):
                (dynamic if isinstance(dim, str) else fixed).setdefault(declared, (spec.name, axis))
    for name in sorted(dynamic.keys() & fixed.keys()):
        (left, left_axis), (kept, kept_axis) = dynamic[name], fixed[name]
        raise InputShapeError(
            f"Dim {name!r} is shared by input {left!r} axis {left_axis}, left dynamic, and input "
            f"{kept!r} axis {kept_axis}, fixed; the model needs one size for it in every input, "
            "so leave it dynamic in both (with the same profile range) or fix it in both.",
            input_name=kept)


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
                "integer; give the size to run at, a whole number of at least 1 (the model's "
                f"dynamic axes, -1 included, take any), e.g. {list(_default_shape(spec.shape))}.",
                input_name=spec.name)
        if isinstance(declared, int) and declared != dim:
            raise InputShapeError(
                f"Input {spec.name!r} axis {axis} is fixed at {declared} in the model "
                f"(shape {_show(spec.shape)}), but {dim} was requested; use {declared} there. "
                "Only the dynamic axes can be given other sizes.", input_name=spec.name)
        resolved.append(int(dim))
    return tuple(resolved)


def _set_dims(value: onnx.ValueInfoProto, dims: tuple[int | str, ...]) -> None:
    shape = value.type.tensor_type.shape
    del shape.dim[:]
    for size in dims:
        if isinstance(size, str):
            shape.dim.add().dim_param = size
        else:
            shape.dim.add().dim_value = size


def _default_shape(shape: tuple[Dim, ...]) -> tuple[int, ...]:
    return tuple(dim if isinstance(dim, int) else DEFAULT_DYNAMIC_DIM for dim in shape)


def _show(shape: tuple[Dim, ...]) -> str:
    return "[" + ", ".join("?" if dim is None else str(dim) for dim in shape) + "]"
