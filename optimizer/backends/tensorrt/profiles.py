"""Optimization profiles: the min/opt/max shape range a TensorRT engine accepts for each input.

TensorRT builds a dynamic input (a -1 dim in the network) for a range of shapes and tunes its
kernels for the `opt` shape; every runtime shape must lie within [min, max] axis by axis
(https://docs.nvidia.com/deeplearning/tensorrt/11.4.0/_static/python-api/infer/Core/OptimizationProfile.html).
A job gives ranges as plain JSON, e.g. ``{"input": {"min": [1, 3, 224, 224], "opt": [8, 3, 224,
224], "max": [32, 3, 224, 224]}}``; an input it leaves out is built for one shape: the job's
`input_shapes` entry, or the model's own shape with dynamic dims at 1 (`resolve_input_shapes`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from optimizer.errors import InputShapeError
from optimizer.model.shapes import resolve_input_shapes
from optimizer.model.tensor_specs import TensorSpec, unknown_input_message

__all__ = ["OptimizationProfileSpec", "profiles_to_dict", "profiles_from_dict", "resolve_profiles"]

_KEYS = ("min", "opt", "max")


@dataclass(frozen=True)
class OptimizationProfileSpec:
    """The shapes one input accepts: `min <= opt <= max` on every axis, all of one rank."""

    min: tuple[int, ...]
    opt: tuple[int, ...]
    max: tuple[int, ...]

    @classmethod
    def static(cls, shape: Sequence[int]) -> OptimizationProfileSpec:
        """A profile for exactly one shape."""
        dims = tuple(int(dim) for dim in shape)
        return cls(min=dims, opt=dims, max=dims)

    @property
    def is_static(self) -> bool:
        return self.min == self.opt == self.max

    def contains(self, shape: Sequence[int]) -> bool:
        """Whether `shape` lies within [min, max] on every axis."""
        return len(shape) == len(self.min) and all(
            low <= dim <= high for low, dim, high in zip(self.min, shape, self.max, strict=True))

    def to_dict(self) -> dict[str, list[int]]:
        return {"min": list(self.min), "opt": list(self.opt), "max": list(self.max)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Sequence[int]]) -> OptimizationProfileSpec:
        """Rebuild from `to_dict()` output; no validation (use `resolve_profiles` on job input)."""
        return cls(min=tuple(data["min"]), opt=tuple(data["opt"]), max=tuple(data["max"]))


def resolve_profiles(
    inputs: Sequence[TensorSpec],
    requested: Mapping[str, Any] | None,
    *,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
) -> dict[str, OptimizationProfileSpec]:
    """One validated profile per model input, in the model's input order.

    `requested` maps an input name to ``{"min": [...], "opt": [...], "max": [...]}`` or to one
    shape (a list of ints: a static profile). Inputs it leaves out get a static profile at
    their `input_shapes` entry, or at the model's shape with dynamic dims at 1. An
    `input_shapes` entry for an input with a profile must lie within it: it is the shape
    validation and benchmarking feed.

    >>> spec = TensorSpec("input", "float32", ("N", 3, 32, 32))
    >>> resolve_profiles([spec], {"input": {"min": [1, 3, 32, 32], "opt": [4, 3, 32, 32],
    ...                                     "max": [8, 3, 32, 32]}})["input"].opt
    (4, 3, 32, 32)

    Raises:
        InputShapeError: a name is not an input; a profile is not a mapping with exactly the
            keys min, opt and max (or one shape); a shape has the wrong rank or a dim that is
            not a positive integer; a fixed dim of the model is given another size; min > opt
            or opt > max on some axis; or an `input_shapes` entry lies outside its profile.
    """
    requested = requested or {}
    input_shapes = input_shapes or {}
    by_name = {spec.name: spec for spec in inputs}
    for name in requested:
        if name not in by_name:
            raise InputShapeError(unknown_input_message(
                inputs, f"An optimization profile was given for input {name!r}"), input_name=name)
    # Every given input shape is checked (name, rank, fixed dims) by resolve_input_shapes.
    shapes = resolve_input_shapes(inputs, input_shapes)
    profiles: dict[str, OptimizationProfileSpec] = {}
    for spec in inputs:
        if spec.name not in requested:
            profiles[spec.name] = OptimizationProfileSpec.static(shapes[spec.name])
            continue
        profile = _profile(spec, requested[spec.name])
        if spec.name in input_shapes and not profile.contains(shapes[spec.name]):
            raise InputShapeError(
                f"Input {spec.name!r}: the input shape {list(shapes[spec.name])} lies outside its "
                f"optimization profile (min {list(profile.min)}, max {list(profile.max)}); "
                "give an input shape within the profile, or widen the profile.",
                input_name=spec.name)
        profiles[spec.name] = profile
    return profiles


def profiles_to_dict(profiles: Mapping[str, OptimizationProfileSpec]) -> dict[str, Any]:
    """JSON for an engine's metadata: input name -> {"min", "opt", "max"}."""
    return {name: profile.to_dict() for name, profile in profiles.items()}


def profiles_from_dict(data: Mapping[str, Any]) -> dict[str, OptimizationProfileSpec]:
    """Inverse of `profiles_to_dict`."""
    return {name: OptimizationProfileSpec.from_dict(value) for name, value in data.items()}


def _profile(spec: TensorSpec, given: Any) -> OptimizationProfileSpec:
    if isinstance(given, Mapping):
        keys = set(given)
        if keys != set(_KEYS):
            missing = [key for key in _KEYS if key not in keys]
            extra = sorted(str(key) for key in keys - set(_KEYS))
            problem = "; ".join(part for part in (
                f"missing {', '.join(missing)}" if missing else "",
                f"unknown key(s) {', '.join(map(repr, extra))}" if extra else "") if part)
            raise InputShapeError(
                f"Input {spec.name!r}: an optimization profile needs exactly the keys min, opt "
                f"and max ({problem}), e.g. {_example(spec)}.", input_name=spec.name)
        shapes = {key: _shape(spec, key, given[key]) for key in _KEYS}
    else:
        shape = _shape(spec, "shape", given)
        shapes = dict.fromkeys(_KEYS, shape)
    for axis in range(len(spec.shape)):
        low, opt, high = (shapes[key][axis] for key in _KEYS)
        if not low <= opt <= high:
            raise InputShapeError(
                f"Input {spec.name!r} axis {axis}: the profile has min {low}, opt {opt}, max "
                f"{high}; give min <= opt <= max on every axis.", input_name=spec.name)
    return OptimizationProfileSpec(min=shapes["min"], opt=shapes["opt"], max=shapes["max"])


def _shape(spec: TensorSpec, key: str, given: Any) -> tuple[int, ...]:
    # The same rules as any requested shape: a list of positive ints of the input's rank that
    # keeps the model's fixed dims.
    try:
        return resolve_input_shapes([spec], {spec.name: given})[spec.name]
    except InputShapeError as err:
        raise InputShapeError(f"Optimization profile {key}: {err}",
                              input_name=spec.name) from err


def _example(spec: TensorSpec) -> str:
    low = [dim if isinstance(dim, int) else 1 for dim in spec.shape]
    high = [dim if isinstance(dim, int) else 8 for dim in spec.shape]
    return f'{{"min": {low}, "opt": {high}, "max": {high}}}'

