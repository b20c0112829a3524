"""Make seeded random input batches for validating and benchmarking a model."""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from optimizer.errors import InputRangeError, InternalError, UnsupportedModelError
from optimizer.model.input_ranges import InputRange
from optimizer.model.tensor_specs import TensorSpec, numpy_dtype, unknown_input_message

__all__ = ["DEFAULT_INT_HIGH", "random_feeds"]

# Small non-negative integers are valid for the usual integer inputs (token ids, indices,
# lengths) of any model with at least ten entries on the indexed axis.
DEFAULT_INT_HIGH = 10


def random_feeds(
    inputs: Sequence[TensorSpec],
    *,
    count: int,
    seed: int,
    ranges: Mapping[str, tuple[float, float] | InputRange] | None = None,
) -> list[dict[str, np.ndarray]]:
    """`count` feeds (input name -> array) for `inputs`, the same ones for the same seed.

    Without a range, floats are standard normal cast to the input's dtype, integers uniform in
    [0, 10), bools fair coin flips. `ranges` (the job's `input_ranges`) maps an input name to
    [low, high): integers are then uniform over low..high-1 (e.g. token ids in [0, vocab)),
    floats uniform in [low, high). A range may be an `InputRange` (e.g. from
    `optimizer.model.input_ranges.effective_ranges`, which infers token-id and mask ranges from the
    graph). Inputs without a range draw the same values whether or not other inputs have one.
    Every shape must be concrete: pass specs through `resolve_input_shapes`.

    >>> random_feeds([TensorSpec("ids", "int64", (1, 8))], count=2, seed=0,
    ...              ranges={"ids": (0, 30522)})                  # doctest: +SKIP

    Raises:
        InputRangeError: a range names no input, is not two finite numbers with low < high,
            gives an integer input non-integer bounds or bounds outside its dtype, or is given
            for a bool input.
        InternalError: a shape still has a symbolic or unknown dim, or `count` < 1.
        UnsupportedModelError: an input's dtype cannot be generated (e.g. string).
    """
    if count < 1:
        raise InternalError(f"random_feeds needs count >= 1, got {count}.")
    ranges = ranges or {}
    _refuse_unknown_names(inputs, ranges)
    plan = [(spec.name, _dtype(spec), _concrete_shape(spec)) for spec in inputs]
    bounds = {name: _checked_range(name, dtype, ranges[name])
              for name, dtype, _ in plan if name in ranges}
    rng = np.random.default_rng(seed)
    return [{name: _random_array(rng, dtype, shape, bounds.get(name))
             for name, dtype, shape in plan}
            for _ in range(count)]


def _refuse_unknown_names(inputs: Sequence[TensorSpec],
                          ranges: Mapping[str, tuple[float, float] | InputRange]) -> None:
    names = {spec.name for spec in inputs}
    for name in ranges:
        if name not in names:
            raise InputRangeError(unknown_input_message(
                inputs, f"A value range was given for input {name!r}"), input_name=name)


def _checked_range(name: str, dtype: np.dtype, value: Any) -> tuple[float, float]:
    if isinstance(value, InputRange):
        value = (value.low, value.high)
    try:
        if isinstance(value, (str, bytes, Mapping)):
            raise TypeError(type(value).__name__)
        low, high = value  # any pair: tuple, list (from JSON), array
    except (TypeError, ValueError) as err:
        raise InputRangeError(
            f"Input {name!r}: value range {value!r} is not a pair [low, high]; give two "
            "numbers, e.g. [0, 30522] for token ids.", input_name=name) from err
    for bound in (low, high):
        # bool is an int subclass, and True would silently mean 1.
        if isinstance(bound, bool) or not isinstance(bound, numbers.Real) \
                or not math.isfinite(bound):
            raise InputRangeError(
                f"Input {name!r}: range bound {bound!r} is not a finite number; give "
                "[low, high] with numbers.", input_name=name)
    low, high = _plain_number(low), _plain_number(high)
    if not low < high:
        raise InputRangeError(
            f"Input {name!r}: range [{low}, {high}) is empty; low must be below high (the "
            "range includes low and excludes high).", input_name=name)
    if dtype.kind == "b":
        raise InputRangeError(
            f"Input {name!r} is bool, which takes no value range; drop it from the ranges.",
            input_name=name)
    if dtype.kind in "iu":
        return _integer_range(name, dtype, low, high)
    return float(low), float(high)


def _plain_number(bound: numbers.Real) -> int | float:
    # Integers stay exact (a uint64 bound would lose digits as a float); numpy scalars unwrap.
    return int(bound) if isinstance(bound, numbers.Integral) else float(bound)


def _integer_range(name: str, dtype: np.dtype, low: int | float,
                   high: int | float) -> tuple[float, float]:
    if not all(float(bound).is_integer() for bound in (low, high)):
        raise InputRangeError(
            f"Input {name!r} has integer dtype {dtype.name}, but its range [{low}, {high}) "
            f"has a fractional bound; give whole numbers, e.g. [{math.floor(low)}, "
            f"{math.ceil(high)}).", input_name=name)
    info = np.iinfo(dtype)
    ilow, ihigh = int(low), int(high)
    if ilow < info.min or ihigh - 1 > info.max:
        raise InputRangeError(
            f"Input {name!r} has dtype {dtype.name}, which holds {info.min}..{info.max}, but "
            f"its range [{ilow}, {ihigh}) reaches outside that; keep low >= {info.min} and "
            f"high <= {info.max + 1}.", input_name=name)
    return ilow, ihigh


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


def _random_array(rng: np.random.Generator, dtype: np.dtype, shape: tuple[int, ...],
                  bounds: tuple[float, float] | None) -> np.ndarray:
    if dtype.kind == "b":
        return rng.random(shape) < 0.5
    if dtype.kind in "iu":
        low, high = (0, DEFAULT_INT_HIGH) if bounds is None else (int(bounds[0]), int(bounds[1]))
        # Drawn as int64 (uint64 for ranges above it) so every dtype's full range is reachable.
        return rng.integers(low, high, size=shape, dtype=np.uint64 if high > 2**63 - 1
                            else np.int64).astype(dtype)
    if bounds is None:
        return rng.standard_normal(shape).astype(dtype)
    # Rounding to a narrower float (fp16, bf16) can land a value just below `high` on it.
    return rng.uniform(bounds[0], bounds[1], size=shape).astype(dtype)
