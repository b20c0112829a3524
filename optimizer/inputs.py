"""Make seeded random input batches for validating and benchmarking a model."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from optimizer.errors import InternalError, UnsupportedModelError
from optimizer.tensor_specs import TensorSpec, numpy_dtype

__all__ = ["random_feeds"]

# Small non-negative integers are valid for the usual integer inputs (token ids, indices,
# lengths) of any model with at least ten entries on the indexed axis.
_INT_HIGH = 10


def random_feeds(
    inputs: Sequence[TensorSpec], *, count: int, seed: int
) -> list[dict[str, np.ndarray]]:
    """`count` feeds (input name -> array) for `inputs`, the same ones for the same seed.

    Floats are standard normal cast to the input's dtype, integers uniform in [0, 10), bools
    fair coin flips. Every shape must be concrete: pass specs through `resolve_input_shapes`.

    Raises:
        InternalError: a shape still has a symbolic or unknown dim, or `count` < 1.
        UnsupportedModelError: an input's dtype cannot be generated (e.g. string).
    """
    if count < 1:
        raise InternalError(f"random_feeds needs count >= 1, got {count}.")
    plan = [(spec.name, _dtype(spec), _concrete_shape(spec)) for spec in inputs]
    rng = np.random.default_rng(seed)
    return [{name: _random_array(rng, dtype, shape) for name, dtype, shape in plan}
            for _ in range(count)]


def _dtype(spec: TensorSpec) -> np.dtype:
    try:
        dtype = numpy_dtype(spec.dtype)
    except TypeError:
        dtype = np.dtype(object)
    if dtype.kind not in "fiub" and not _is_extended_float(dtype):
        raise UnsupportedModelError(
            f"Input {spec.name!r} has dtype {spec.dtype!r}, for which FuseForge cannot make "
            "test data; only float, integer and bool inputs are supported.")
    return dtype


def _concrete_shape(spec: TensorSpec) -> tuple[int, ...]:
    shape = tuple(dim for dim in spec.shape if isinstance(dim, int) and dim >= 0)
    if len(shape) != len(spec.shape):
        raise InternalError(
            f"random_feeds got input {spec.name!r} with shape {list(spec.shape)}; every "
            "dim must be a concrete int (resolve the shapes first).")
    return shape


def _is_extended_float(dtype: np.dtype) -> bool:
    # ml_dtypes types (bfloat16, float8_*) have kind "V" but convert from float64.
    return dtype.kind == "V" and dtype.name.startswith(("bfloat", "float"))


def _random_array(rng: np.random.Generator, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
    if dtype.kind == "b":
        return rng.random(shape) < 0.5
    if dtype.kind in "iu":
        return rng.integers(0, _INT_HIGH, size=shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)
