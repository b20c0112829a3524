"""Resolve a job's input options (shapes, profiles, ranges, dataset) against its model's inputs.

One function, `resolve_job_inputs`, for the API (which refuses a job before it is stored) and
the worker's load stage (which runs it again on the stored config), so both apply one set of
rules. Every refusal is an optimizer error tagged with the job option at fault (`field`:
`input_shapes.<name>`, `profiles.<name>`, `input_ranges.<name>`, `dataset_id`), and its message
starts with that field, says what is wrong and what would work.

A dataset array has shape [S, *sample_shape]: sample i is one model call with the input at
`sample_shape`, the model's batch dim included. Inputs the job gives no `input_shapes` for take
their shape from the dataset; those it does give must equal the dataset's sample shape.

An optimization profile (TensorRT only) gives the range of shapes the engine accepts for an
input; the job still validates and benchmarks at one shape per input, which must lie within the
profile: its `input_shapes` entry, else the dataset's sample shape, else the profile's `opt`.
"""

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from optimizer.backends.tensorrt.profiles import OptimizationProfileSpec, resolve_profiles
from optimizer.errors import DatasetError, InputRangeError, InputShapeError
from optimizer.model.shapes import resolve_input_shapes
from optimizer.model.tensor_specs import Dim, TensorSpec, numpy_dtype, shared_dim_conflict

__all__ = ["DatasetArrays", "ResolvedInputs", "resolve_job_inputs"]

Shapes = dict[str, tuple[int, ...]]
Profiles = dict[str, OptimizationProfileSpec]


@dataclass(frozen=True)
class DatasetArrays:
    """What the rules need of a job's dataset: its arrays, each shaped as one sample (the
    leading sample axis left out), and how many samples each holds."""

    label: str  # how messages name it, e.g. "dataset 3f2a... ('val')"
    samples: int
    arrays: tuple[TensorSpec, ...]


@dataclass(frozen=True)
class ResolvedInputs:
    """A job's inputs once they fit the model."""

    shapes: Shapes  # every input's concrete shape: what validation and benchmarks feed
    profiles: Profiles  # the job's profiles, one per input it names, in the model's order

    def profile_of_every_input(self, inputs: Sequence[TensorSpec]) -> Profiles:
        """A profile per model input: the job's, else a static one at the input's shape."""
        return {spec.name: self.profiles.get(spec.name)
                or OptimizationProfileSpec.static(self.shapes[spec.name]) for spec in inputs}


def resolve_job_inputs(
    inputs: Sequence[TensorSpec],
    *,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    profiles: Mapping[str, Mapping[str, Sequence[int]]] | None = None,
    input_ranges: Mapping[str, tuple[float, float]] | None = None,
    dataset: DatasetArrays | None = None,
) -> ResolvedInputs:
    """The job's shapes and profiles for the model's `inputs`, once every option fits.

    Raises:
        InputShapeError: `profiles.<name>` as `resolve_profiles` refuses it (unknown input,
            rank, a dim not a positive integer, a fixed dim changed, min > opt or opt > max),
            or the input's shape (given or the dataset's) lies outside it, or a dim the model
            names in several inputs (e.g. "batch") is not given one range in all of them;
            `input_shapes.<name>` as `resolve_input_shapes` refuses it.
        DatasetError: `dataset_id`: the dataset's arrays do not fit the model's inputs (names,
            dtypes, sample shapes) or the explicit `input_shapes`.
        InputRangeError: `input_ranges.<name>`: see `_check_input_ranges`.
    """
    resolved_profiles = _job_profiles(inputs, profiles)
    shapes = _job_input_shapes(inputs, input_shapes, dataset, resolved_profiles)
    _check_input_ranges(inputs, input_ranges)
    return ResolvedInputs(shapes=shapes, profiles=resolved_profiles)


def _job_profiles(
    inputs: Sequence[TensorSpec],
    requested: Mapping[str, Mapping[str, Sequence[int]]] | None,
) -> Profiles:
    # One per input `requested` names, in the model's input order, exactly as given once valid.
    if not requested:
        return {}
    try:
        resolved = resolve_profiles(inputs, requested)
    except InputShapeError as err:
        field = f"profiles.{err.input_name}" if err.input_name else "profiles"
        raise InputShapeError(f"{field}: {err}", input_name=err.input_name, field=field) from err
    return {spec.name: resolved[spec.name] for spec in inputs if spec.name in requested}


def _job_input_shapes(
    inputs: Sequence[TensorSpec],
    requested: Mapping[str, Sequence[int]] | None,
    dataset: DatasetArrays | None,
    profiles: Profiles,
) -> Shapes:
    # From `input_shapes`, the dataset and the profiles: a profiled input with neither runs at
    # its `opt`.
    try:
        shapes = resolve_input_shapes(inputs, requested)
    except InputShapeError as err:
        field = f"input_shapes.{err.input_name}" if err.input_name else "input_shapes"
        raise InputShapeError(f"{field}: {err}", input_name=err.input_name, field=field) from err
    explicit = set(requested or {})
    if dataset is not None:
        shapes = _shapes_from_dataset(inputs, shapes, explicit, dataset)
    for name, profile in profiles.items():
        if name in explicit or dataset is not None:
            _check_within_profile(name, shapes[name], profile, dataset)
        else:
            shapes[name] = profile.opt
    _check_shared_dims_profiled(inputs, shapes, profiles)
    return shapes


def _check_input_ranges(
    inputs: Sequence[TensorSpec], ranges: Mapping[str, tuple[float, float]] | None
) -> None:
    """Each range names a numeric input and is a non-empty [low, high) its dtype can hold.

    The rules are those `optimizer.model.inputs.random_feeds` applies when the worker draws the
    inputs (integer inputs take whole-number bounds, bool inputs no range), plus float bounds
    within the dtype's largest magnitude, so a job that starts does not fail on its ranges.
    Refused: an unknown input, a bound not finite, low >= high, a bool or non-numeric input,
    a fractional bound for an integer input, or a bound beyond what the input's dtype holds.
    """
    by_name = {spec.name: spec for spec in inputs}
    for name, (low, high) in (ranges or {}).items():
        field = f"input_ranges.{name}"

        def refuse(problem: str, field: str = field, name: str = name) -> InputRangeError:
            return InputRangeError(f"{field}: {problem}", input_name=name, field=field)

        spec = by_name.get(name)
        if spec is None:
            raise refuse(f"the model has no input {name!r}; its inputs are: {_names(by_name)}")
        if not (math.isfinite(low) and math.isfinite(high)):
            raise refuse(f"[{low}, {high}) is not finite; give finite bounds")
        if not low < high:
            raise refuse(f"low {low} must be below high {high} (the range is [low, high))")
        try:
            dtype = numpy_dtype(spec.dtype)
        except TypeError:
            dtype = np.dtype(object)
        if dtype.kind in "iu":
            info = np.iinfo(dtype)
            if not (low.is_integer() and high.is_integer()):
                raise refuse(f"input {name!r} is {spec.dtype}, so its bounds are whole "
                             f"numbers, e.g. [{math.floor(low)}, {math.ceil(high)})")
            if low < info.min or high > info.max + 1:
                raise refuse(f"input {name!r} is {spec.dtype}, which holds [{info.min}, "
                             f"{info.max + 1}); [{low:.0f}, {high:.0f}) goes beyond it")
        elif dtype.kind == "f":
            limit = float(np.finfo(dtype).max)
            if low < -limit or high > limit:
                raise refuse(f"input {name!r} is {spec.dtype}, whose largest magnitude is "
                             f"{limit:g}; [{low}, {high}) goes beyond it")
        elif dtype.kind != "V":  # ml_dtypes floats (bfloat16...) take any finite range
            raise refuse(f"input {name!r} is {spec.dtype}; ranges apply to integer and float "
                         "inputs only")


def _dataset_error(problem: str) -> DatasetError:
    return DatasetError(f"dataset_id: {problem}", field="dataset_id")


def _shapes_from_dataset(
    inputs: Sequence[TensorSpec], shapes: Shapes, explicit: set[str], dataset: DatasetArrays
) -> Shapes:
    where = dataset.label
    arrays = {array.name: array for array in dataset.arrays}
    by_name = {spec.name: spec for spec in inputs}
    missing = [name for name in by_name if name not in arrays]
    extra = [name for name in arrays if name not in by_name]
    if missing or extra:
        problems = ([f"it has no array for input(s) {_names(missing)}"] if missing else []) + (
            [f"its array(s) {_names(extra)} are not model inputs"] if extra else [])
        raise _dataset_error(
            f"{where} does not fit the model: {'; '.join(problems)}. The model's inputs are "
            f"{_names(by_name)}: upload an .npz with one array per input, named after it, "
            "plus an optional 'labels'")
    resolved = dict(shapes)
    for spec in inputs:
        array = arrays[spec.name]
        sample = tuple(int(dim) for dim in array.shape if isinstance(dim, int))
        if array.dtype != spec.dtype:
            raise _dataset_error(
                f"{where}: array {spec.name!r} is {array.dtype} but model input {spec.name!r} "
                f"takes {spec.dtype}; save it with array.astype(np.{spec.dtype})")
        if not _accepts(spec.shape, sample):
            raise _dataset_error(
                f"{where}: array {spec.name!r} holds samples of shape {list(sample)}, which "
                f"model input {spec.name!r} of shape {_show(spec.shape)} does not take. Each "
                "sample is one model call with the full input shape, batch dim included: the "
                f"array needs shape {_show(('samples', *spec.shape))}, e.g. "
                f"{[dataset.samples, *shapes[spec.name]]}")
        if spec.name in explicit and shapes[spec.name] != sample:
            raise _dataset_error(
                f"{where}: array {spec.name!r} holds samples of shape {list(sample)}, but "
                f"input_shapes sets input {spec.name!r} to {list(shapes[spec.name])}; each "
                f"sample is one model call, so drop input_shapes.{spec.name} (the dataset "
                "sets it) or upload samples of that shape")
        resolved[spec.name] = sample
    conflict = shared_dim_conflict(inputs, lambda spec, axis: resolved[spec.name][axis])
    if conflict is not None:
        raise _dataset_error(
            f"{where}: dim {conflict.dim!r} is {conflict.first_value} in input "
            f"{conflict.first_input!r} but {conflict.value} in input {conflict.input!r}; the "
            "model needs one size for it in every input")
    return resolved


def _check_within_profile(
    name: str, shape: tuple[int, ...], profile: OptimizationProfileSpec,
    dataset: DatasetArrays | None,
) -> None:
    if profile.contains(shape):
        return
    field = f"profiles.{name}"
    bounds = f"(min {list(profile.min)}, max {list(profile.max)})"
    if dataset is None:
        raise InputShapeError(
            f"{field}: input_shapes sets input {name!r} to {list(shape)}, outside its "
            f"optimization profile {bounds}; validation and benchmarks run at that shape, so "
            "give an input shape within the profile, or widen the profile.",
            input_name=name, field=field)
    raise InputShapeError(
        f"{field}: {dataset.label} holds samples of shape {list(shape)} for input {name!r}, "
        f"outside its optimization profile {bounds}; each sample is one model call on the "
        "engine, so widen the profile to cover it or upload samples within it.",
        input_name=name, field=field)


def _check_shared_dims_profiled(
    inputs: Sequence[TensorSpec], shapes: Shapes, profiles: Profiles
) -> None:
    # Every input that has a shared dim needs the same range on it; an input without a
    # profile is fixed at its shape.
    if not profiles:
        return

    def span(spec: TensorSpec, axis: int) -> tuple[int, int, int]:
        profile = profiles.get(spec.name) or OptimizationProfileSpec.static(shapes[spec.name])
        return profile.min[axis], profile.opt[axis], profile.max[axis]

    conflict = shared_dim_conflict(inputs, span)
    if conflict is None:
        return
    first, name = conflict.first_input, conflict.input
    field = f"profiles.{name if name in profiles else first}"
    raise InputShapeError(
        f"{field}: dim {conflict.dim!r} {_span(first, conflict.first_value, profiles)} "
        f"in input {first!r} but {_span(name, conflict.value, profiles)} in input {name!r}; the "
        "model needs one size for it in every input, so give every input that has it the same "
        "min, opt and max on that axis.", input_name=name, field=field)


def _span(name: str, span: tuple[int, int, int], profiles: Mapping[str, object]) -> str:
    low, opt, high = span
    if name not in profiles:
        return f"is fixed at {opt} (no profile, so its input shape)"
    if low == high:
        return f"is fixed at {opt}"
    return f"ranges over min {low}, opt {opt}, max {high}"


def _accepts(declared: tuple[Dim, ...], sample: tuple[int, ...]) -> bool:
    return len(declared) == len(sample) and all(
        not isinstance(dim, int) or dim == size for dim, size in zip(declared, sample, strict=True))


def _show(shape: Sequence[Dim]) -> str:
    return "[" + ", ".join("?" if dim is None else str(dim) for dim in shape) + "]"


def _names(names: Sequence[str] | Mapping[str, object]) -> str:
    return ", ".join(repr(name) for name in names) or "none"
