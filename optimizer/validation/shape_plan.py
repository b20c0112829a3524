"""Choose the input shapes a model is validated at when its dims are dynamic.

At the default shape every dynamic dim is 1, and a transformer at sequence length 1 takes a
softmax over one key, which is 1 whatever the scores and the mask: a broken attention or mask
passes. So when no shape was asked for, a model with dynamic dims is also checked at a larger
shape: batch (axis 0) 2 and every other dynamic dim 16. A dim that inputs share by name gets one
size in all of them. The caller drops a larger shape the original model cannot run at.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from optimizer.errors import InputShapeError
from optimizer.model.shapes import resolve_input_shapes
from optimizer.model.tensor_specs import Dim, TensorSpec

__all__ = ["LARGER_BATCH", "LARGER_DIM", "InputShapes", "validation_shapes"]

LARGER_BATCH = 2  # two rows: a batch mix-up (a reduction over the batch) shows
LARGER_DIM = 16  # a softmax over 16 keys depends on the scores and on the mask

InputShapes = dict[str, tuple[int, ...]]


def validation_shapes(inputs: Sequence[TensorSpec], requested: Mapping[str, Sequence[int]],
                      *, fixed_by: Sequence[TensorSpec] = ()) -> list[InputShapes]:
    """The shapes to validate `inputs` at, the default (or requested) one first.

    With `requested` shapes, or no dynamic dim, only that one shape. Otherwise also a larger
    one (module docstring). `fixed_by` are the inputs of a second model run on the same feeds
    (the candidate): a dim it fixes is taken as fixed.

    >>> validation_shapes([TensorSpec("ids", "int64", ("batch", "seq"))], {})
    [{'ids': (1, 1)}, {'ids': (2, 16)}]

    Raises:
        InputShapeError: as `resolve_input_shapes`.
    """
    specs = _with_fixed_dims(inputs, fixed_by)
    first = resolve_input_shapes(specs, requested)
    if requested or not any(_is_dynamic(dim) for spec in specs for dim in spec.shape):
        return [first]
    try:
        larger = resolve_input_shapes(specs, _larger(specs))
    except InputShapeError:
        return [first]  # a dim the model will not take at any other size: the default only
    return [first] if larger == first else [first, larger]


def _larger(specs: Sequence[TensorSpec]) -> dict[str, list[int]]:
    by_name: dict[str, int] = {}
    shapes = {}
    for spec in specs:
        dims = []
        for axis, dim in enumerate(spec.shape):
            size = LARGER_BATCH if axis == 0 else LARGER_DIM
            if not _is_dynamic(dim):
                assert isinstance(dim, int)
                dims.append(dim)
            elif isinstance(dim, str):
                dims.append(by_name.setdefault(dim, size))
            else:
                dims.append(size)
        shapes[spec.name] = dims
    return shapes


def _with_fixed_dims(inputs: Sequence[TensorSpec],
                     fixed_by: Sequence[TensorSpec]) -> list[TensorSpec]:
    # A candidate written by `fuseforge optimize --input-shape` has every dim fixed: checking
    # it at another size would only test that ONNX Runtime refuses it.
    others = {spec.name: spec.shape for spec in fixed_by}
    specs = []
    for spec in inputs:
        other = others.get(spec.name)
        if other is None or len(other) != len(spec.shape):
            specs.append(spec)
            continue
        shape = tuple(theirs if _is_dynamic(ours) and not _is_dynamic(theirs) else ours
                      for ours, theirs in zip(spec.shape, other, strict=True))
        specs.append(TensorSpec(spec.name, spec.dtype, shape))
    return specs


def _is_dynamic(dim: Dim) -> bool:
    # dim_value -1 (Paddle2ONNX) means dynamic too.
    return not isinstance(dim, int) or dim < 1
