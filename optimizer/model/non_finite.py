"""Weights that hold NaN or infinity: valid ONNX, but every output that depends on them is NaN
or infinite, so a job on such a model "succeeds" at computing garbage. The upload and the job
say so; validation then holds the engine to the original's own NaNs (no more, in the same
places: optimizer/validation/compare.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import numpy as np
import onnx
from onnx import numpy_helper

from optimizer.model.graphs import iter_tensors
from optimizer.model.skeleton import WeightCount

__all__ = ["non_finite_weights"]

_NAMED = 5  # tensors named in the warning; the rest are counted


def non_finite_weights(model: onnx.ModelProto, also: Iterable[WeightCount] = ()) -> str | None:
    """A warning naming the float weights (initializers, Constant values, in every graph and
    function) that hold NaN or infinite values; None where all are finite. `also`: counts
    made elsewhere (a skeleton's stripped tensors, which `model` holds no values of)."""
    counted = [*_counts(model), *((w.name, w.nan, w.inf, w.size) for w in also)]
    found = [(name, nan, inf, size) for name, nan, inf, size in counted if nan or inf]
    if not found:
        return None
    named = "; ".join(f"{name!r}: {_count(nan, 'NaN')}{', ' if nan and inf else ''}"
                      f"{_count(inf, 'infinite')} of {size}"
                      for name, nan, inf, size in found[:_NAMED])
    more = f"; and {len(found) - _NAMED} more" if len(found) > _NAMED else ""
    return (f"{len(found)} weight tensor(s) hold NaN or infinite values ({named}{more}): the "
            "outputs that depend on them are NaN or infinite too. A job validates the engine "
            "against the original's own NaNs, but the model computes nothing useful; re-export "
            "it from a checkpoint without them.")


def _count(count: int, what: str) -> str:
    return f"{count} {what}" if count else ""


def _counts(model: onnx.ModelProto) -> Iterator[tuple[str, int, int, int]]:
    """(name, NaN count, infinity count, elements) of each float weight tensor."""
    for tensor in iter_tensors(model):
        yield _tensor_counts(tensor.name or "a Constant's value", tensor)


def _tensor_counts(name: str, tensor: onnx.TensorProto) -> tuple[str, int, int, int]:
    if tensor.data_type not in _FLOAT_TYPES or tensor.data_location == onnx.TensorProto.EXTERNAL:
        return name, 0, 0, 0
    try:
        values = numpy_helper.to_array(tensor).astype(np.float32, copy=False)
    except (ValueError, TypeError):  # a tensor whose data does not fit its dims: the checker's
        return name, 0, 0, 0
    nan = int(np.isnan(values).sum())
    inf = int(np.isinf(values).sum())
    return name, nan, inf, int(values.size)


_FLOAT_TYPES = frozenset({onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16,
                          onnx.TensorProto.DOUBLE, onnx.TensorProto.BFLOAT16})
