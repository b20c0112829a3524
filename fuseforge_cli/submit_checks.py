"""What `fuseforge submit` checks on this machine before it uploads anything: the job's input
shapes and ranges, and its datasets (--validation, --calibration), against the model's inputs,
by the rules the server applies when it creates the job (optimizer/job_inputs.py), so a
dataset without the batch dim fails in a second rather than after a long upload.

The model is read without its weights (optimizer/model/skeleton.py), a dataset from its array
headers (optimizer/validation/datasets.py): memory stays flat whatever their size. A model
this cannot read is left to the server, whose refusal says why.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fuseforge_cli.failures import EXIT_USAGE, CliFailure

__all__ = ["check_before_upload"]

# The job option a refusal starts with, and the flag that sets it.
_FLAGS = {"input_shapes": "--input-shape", "input_ranges": "--input-range"}


def check_before_upload(model: Path, body: Mapping[str, Any], *, validation: Path | None,
                        calibration: Path | None) -> None:
    """Check the job's options and datasets against `model`'s inputs.

    Raises:
        CliFailure: (exit 3) a dataset's arrays do not fit the inputs (names, dtypes, shapes
            with the batch dim), or --input-shape / --input-range name an input the model
            lacks or give it a value it cannot take; the message names the file and the fix.
    """
    from optimizer.errors import DatasetError, InputRangeError, InputShapeError  # noqa: PLC0415
    from optimizer.job_inputs import resolve_job_inputs  # noqa: PLC0415

    inputs = _model_inputs(model)
    parsed, profiles = _profiles(body)
    if inputs is None or not parsed:
        return
    datasets: list[tuple[str, Path | None]] = [
        (flag, path) for flag, path in (("--validation", validation),
                                        ("--calibration", calibration)) if path is not None]
    for flag, path in datasets or [("", None)]:
        try:
            arrays = None if path is None else _dataset_arrays(flag, path)
            resolve_job_inputs(inputs, input_shapes=body.get("input_shapes"), profiles=profiles,
                               input_ranges=_ranges(body), dataset=arrays)
        except (InputShapeError, InputRangeError, DatasetError) as err:
            raise CliFailure(type(err).__name__, _said(err, model, flag, path),
                             EXIT_USAGE) from err


def _ranges(body: Mapping[str, Any]) -> dict[str, tuple[float, float]] | None:
    """input_ranges as the server reads them (its schema makes each bound a float)."""
    ranges = body.get("input_ranges")
    if not isinstance(ranges, Mapping):
        return None
    try:
        return {str(name): (float(low), float(high)) for name, (low, high) in ranges.items()}
    except (TypeError, ValueError):
        return None  # not [low, high]: the server's 422 names the field


def _model_inputs(model: Path) -> tuple[Any, ...] | None:
    """The model's inputs (TensorSpecs) read without its weights; None where it is no ONNX
    model this can read (the server says why)."""
    import onnx  # noqa: PLC0415

    from optimizer.model.skeleton import SkeletonBuilder  # noqa: PLC0415
    from optimizer.model.tensor_specs import summarize_model  # noqa: PLC0415

    builder = SkeletonBuilder(model.name)
    try:
        with model.open("rb") as handle:
            while chunk := handle.read(2**20):
                builder.feed(chunk)
        skeleton = builder.finish()
        proto = onnx.load_model_from_string(skeleton.data)
    except Exception:  # noqa: BLE001 - not a model: the server's refusal says why, better
        return None
    return summarize_model(proto).inputs


def _profiles(body: Mapping[str, Any]) -> tuple[bool, dict[str, dict[str, list[int]]] | None]:
    """The job's optimization profiles as the optimizer takes them (None without), and
    whether the config parsed: where it does not, the server's 422 names the field."""
    if not body.get("profiles"):
        return True, None
    from pydantic import ValidationError  # noqa: PLC0415

    from core.job_config import JobConfig  # noqa: PLC0415

    try:
        return True, JobConfig.model_validate(body).profile_shapes()
    except ValidationError:
        return False, None


def _dataset_arrays(flag: str, path: Path) -> Any:
    from optimizer.job_inputs import DatasetArrays  # noqa: PLC0415
    from optimizer.validation.datasets import inspect_dataset  # noqa: PLC0415

    contents = inspect_dataset(path)
    return DatasetArrays(label=f"{flag} {path.name}", samples=contents.samples,
                         arrays=contents.arrays)


def _said(err: Exception, model: Path, flag: str, path: Path | None) -> str:
    """The optimizer's refusal, about the file or the flag at fault rather than the job field
    the server would name."""
    text = str(err).removeprefix("dataset_id: ")
    field = getattr(err, "field", None) or ""
    if path is not None and (field == "dataset_id" or text.startswith(f"{flag} {path.name}")):
        return f"{text} (model {model.name!r}; checked here: nothing was uploaded)"
    option = field.split(".")[0]
    fix = f" ({option} comes from {_FLAGS[option]} or --config)" if option in _FLAGS else ""
    return f"model {model.name!r}: {text}{fix} (checked here: nothing was uploaded)"
