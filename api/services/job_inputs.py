"""Check a job's input options (shapes, ranges, dataset) against its model's inputs.

Every refusal is an `InvalidJobConfig` whose message starts with the field at fault
(`input_shapes.<name>`, `input_ranges.<name>`, `dataset_id`), so the client can point at it.

A dataset array has shape [S, *sample_shape]: sample i is one model call with the input at
`sample_shape`, the model's batch dim included. Inputs the job gives no `input_shapes` for take
their shape from the dataset; those it does give must equal the dataset's sample shape.
"""

import math
from collections.abc import Mapping, Sequence

import numpy as np

from api.db.models import Dataset
from api.services.errors import InvalidJobConfig
from optimizer.errors import InputShapeError
from optimizer.shapes import resolve_input_shapes
from optimizer.tensor_specs import Dim, TensorSpec, numpy_dtype

__all__ = ["check_input_ranges", "job_input_shapes"]

Shapes = dict[str, tuple[int, ...]]


def job_input_shapes(
    inputs: Sequence[TensorSpec],
    requested: Mapping[str, Sequence[int]] | None,
    dataset: Dataset | None,
) -> Shapes:
    """The concrete shape of every input the job runs at, from `input_shapes` and the dataset.

    Raises:
        InvalidJobConfig: `input_shapes.<name>` as `resolve_input_shapes` refuses it;
            `dataset_id` when the dataset's arrays do not fit the model's inputs (names,
            dtypes, sample shapes) or the explicit `input_shapes`.
    """
    try:
        shapes = resolve_input_shapes(inputs, requested)
    except InputShapeError as err:
        field = f"input_shapes.{err.input_name}" if err.input_name else "input_shapes"
        raise InvalidJobConfig(f"{field}: {err}") from err
    if dataset is None:
        return shapes
    return _shapes_from_dataset(inputs, shapes, set(requested or {}), dataset)


def check_input_ranges(
    inputs: Sequence[TensorSpec], ranges: Mapping[str, tuple[float, float]] | None
) -> None:
    """Each range names a numeric input and is a non-empty [low, high) its dtype can hold.

    The rules are those `optimizer.inputs.random_feeds` applies when the worker draws the
    inputs (integer inputs take whole-number bounds, bool inputs no range), plus float bounds
    within the dtype's largest magnitude, so a job that starts does not fail on its ranges.

    Raises:
        InvalidJobConfig: `input_ranges.<name>`: unknown input, a bound not finite, low >= high,
            a bool or non-numeric input, a fractional bound for an integer input, or a bound
            beyond what the input's dtype holds.
    """
    by_name = {spec.name: spec for spec in inputs}
    for name, (low, high) in (ranges or {}).items():
        field = f"input_ranges.{name}"
        spec = by_name.get(name)
        if spec is None:
            raise InvalidJobConfig(
                f"{field}: the model has no input {name!r}; its inputs are: {_names(by_name)}")
        if not (math.isfinite(low) and math.isfinite(high)):
            raise InvalidJobConfig(f"{field}: [{low}, {high}) is not finite; give finite bounds")
        if not low < high:
            raise InvalidJobConfig(
                f"{field}: low {low} must be below high {high} (the range is [low, high))")
        try:
            dtype = numpy_dtype(spec.dtype)
        except TypeError:
            dtype = np.dtype(object)
        if dtype.kind in "iu":
            info = np.iinfo(dtype)
            if not (low.is_integer() and high.is_integer()):
                raise InvalidJobConfig(
                    f"{field}: input {name!r} is {spec.dtype}, so its bounds are whole "
                    f"numbers, e.g. [{math.floor(low)}, {math.ceil(high)})")
            if low < info.min or high > info.max + 1:
                raise InvalidJobConfig(
                    f"{field}: input {name!r} is {spec.dtype}, which holds [{info.min}, "
                    f"{info.max + 1}); [{low:.0f}, {high:.0f}) goes beyond it")
        elif dtype.kind == "f":
            limit = float(np.finfo(dtype).max)
            if low < -limit or high > limit:
                raise InvalidJobConfig(
                    f"{field}: input {name!r} is {spec.dtype}, whose largest magnitude is "
                    f"{limit:g}; [{low}, {high}) goes beyond it")
        elif dtype.kind != "V":  # ml_dtypes floats (bfloat16...) take any finite range
            raise InvalidJobConfig(
                f"{field}: input {name!r} is {spec.dtype}; ranges apply to integer and float "
                "inputs only")


def _shapes_from_dataset(
    inputs: Sequence[TensorSpec], shapes: Shapes, explicit: set[str], dataset: Dataset
) -> Shapes:
    where = f"dataset_id: dataset {dataset.id} ({dataset.name!r})"
    arrays = {a["name"]: TensorSpec.from_dict(a) for a in dataset.arrays}
    by_name = {spec.name: spec for spec in inputs}
    missing = [name for name in by_name if name not in arrays]
    extra = [name for name in arrays if name not in by_name]
    if missing or extra:
        problems = ([f"it has no array for input(s) {_names(missing)}"] if missing else []) + (
            [f"its array(s) {_names(extra)} are not model inputs"] if extra else [])
        raise InvalidJobConfig(
            f"{where} does not fit the model: {'; '.join(problems)}. The model's inputs are "
            f"{_names(by_name)}: upload an .npz with one array per input, named after it, "
            "plus an optional 'labels'")
    resolved = dict(shapes)
    for spec in inputs:
        array = arrays[spec.name]
        sample = tuple(int(dim) for dim in array.shape if isinstance(dim, int))
        if array.dtype != spec.dtype:
            raise InvalidJobConfig(
                f"{where}: array {spec.name!r} is {array.dtype} but model input {spec.name!r} "
                f"takes {spec.dtype}; save it with array.astype(np.{spec.dtype})")
        if not _accepts(spec.shape, sample):
            raise InvalidJobConfig(
                f"{where}: array {spec.name!r} holds samples of shape {list(sample)}, which "
                f"model input {spec.name!r} of shape {_show(spec.shape)} does not take. Each "
                "sample is one model call with the full input shape, batch dim included: the "
                f"array needs shape {_show(('samples', *spec.shape))}, e.g. "
                f"{[dataset.samples, *shapes[spec.name]]}")
        if spec.name in explicit and shapes[spec.name] != sample:
            raise InvalidJobConfig(
                f"{where}: array {spec.name!r} holds samples of shape {list(sample)}, but "
                f"input_shapes sets input {spec.name!r} to {list(shapes[spec.name])}; each "
                f"sample is one model call, so drop input_shapes.{spec.name} (the dataset "
                "sets it) or upload samples of that shape")
        resolved[spec.name] = sample
    _check_shared_dims(inputs, resolved, where)
    return resolved


def _accepts(declared: tuple[Dim, ...], sample: tuple[int, ...]) -> bool:
    return len(declared) == len(sample) and all(
        not isinstance(dim, int) or dim == size for dim, size in zip(declared, sample, strict=True))


def _check_shared_dims(inputs: Sequence[TensorSpec], shapes: Shapes, where: str) -> None:
    # A symbolic dim shared by several inputs (e.g. "seq" of input_ids and attention_mask)
    # must take one size, or the model fails at run time.
    seen: dict[str, tuple[str, int]] = {}
    for spec in inputs:
        for dim, size in zip(spec.shape, shapes[spec.name], strict=True):
            if not isinstance(dim, str):
                continue
            first = seen.setdefault(dim, (spec.name, size))
            if first[1] != size:
                raise InvalidJobConfig(
                    f"{where}: dim {dim!r} is {first[1]} in input {first[0]!r} but {size} in "
                    f"input {spec.name!r}; the model needs one size for it in every input")


def _show(shape: Sequence[Dim]) -> str:
    return "[" + ", ".join("?" if dim is None else str(dim) for dim in shape) + "]"


def _names(names: Sequence[str] | Mapping[str, object]) -> str:
    return ", ".join(repr(name) for name in names) or "none"
