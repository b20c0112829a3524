"""Stage `load`: check the model again, fix its input shapes to the job's, and load the inputs
it is validated on.

Every job gets model.static.onnx, all inputs fixed at the job's `input_shapes`: the reference
that validation, benchmarks and bisection run. An onnxruntime job whose model ONNX Runtime
cannot load with fixed inputs at the engine's level, but loads as uploaded, fuses and builds its
engine from the upload, inputs left dynamic (`LoadedModel.inputs_left_dynamic` says why).

A job with optimization profiles (TensorRT only) also gets model.profiled.onnx, which the engine
is fused and built from: every axis a profile lets vary (min != max) is left dynamic, every
other axis fixed to its profile's size.
"""

from collections.abc import Mapping, Sequence
from dataclasses import replace
from functools import partial
from pathlib import Path

import onnx

from optimizer.backends.tensorrt.profiles import OptimizationProfileSpec
from optimizer.errors import InferenceError, InferenceTimeLimitError, UnsupportedModelError
from optimizer.job_inputs import resolve_job_inputs
from optimizer.model.input_ranges import InputRange
from optimizer.model.inputs import DEFAULT_INT_HIGH
from optimizer.model.non_finite import non_finite_weights
from optimizer.model.shapes import fix_input_shapes_except
from optimizer.model.tensor_specs import TensorSpec, summarize_model
from optimizer.model_writer import check_model_runs, save_model
from optimizer.static_model import static_model
from worker.pipeline.results import JobRun, LoadedModel
from worker.pipeline.steps.calibration_feeds import calibration_split
from worker.pipeline.steps.feeds import job_feeds, job_input_ranges
from worker.pipeline.weights_files import data_location, load_for_rewrite

__all__ = ["load_model"]

STATIC_MODEL_FILE = "model.static.onnx"
PROFILED_MODEL_FILE = "model.profiled.onnx"


def load_model(run: JobRun) -> LoadedModel:
    """Write the static model (and the profiled one when the job has profiles) to scratch.

    Raises:
        InputShapeError, InputRangeError: the job's input shapes, profiles or ranges do not
            fit the model (`resolve_job_inputs`: the API checked them, so only a model changed
            since would do this), or dynamic dims at 1
            are too small for the model (`static_model`: the message gives shapes to send).
        InvalidModelError: ONNX shape inference fails for these shapes.
        UnsupportedModelError, InferenceError: ONNX Runtime cannot load or run the model with
            its inputs fixed (`model_writer.check_model_runs`).
        DatasetError: the job's dataset does not fit the model's inputs.
    """
    model, folder = load_for_rewrite(run, run.model_path)
    summary = summarize_model(model)
    # The API's rules again, on the model as it is now (the dataset's file is checked below).
    inputs = resolve_job_inputs(summary.inputs, input_shapes=run.config.input_shapes,
                                profiles=run.config.profile_shapes(),
                                input_ranges=run.config.input_ranges)
    # Refuses here, before any pass runs, shapes the model cannot run at (dynamic image dims
    # left at 1) and a static model ONNX Runtime cannot load.
    static = static_model(model, inputs.shapes, data_folder=folder)
    shapes = static.shapes
    specs = tuple(replace(spec, shape=shapes[spec.name]) for spec in summary.inputs)
    ranges = job_input_ranges(run.config, model)
    feeds, labels = job_feeds(run.config, run.dataset_path, specs, ranges)
    split = None
    if run.calibration_path is not None:
        split = calibration_split(run.calibration_path, specs,
                                  has_validation_dataset=run.dataset_path is not None)
        if split.validation is not None:
            feeds, labels = split.validation, split.labels
    # Each model is run once on the job's first sample before it is written.
    save = partial(save_model, reference=model, optimization_level=run.ort_check_level,
                   feeds=feeds[0] if feeds else None, data_folder=folder)
    static_path = run.scratch_dir / STATIC_MODEL_FILE
    what = "the model with the job's input shapes"
    left_dynamic = None
    try:
        # No reference excuses a failed run here: the original is run on these very feeds to
        # validate the engine, so inputs it cannot take end the job now, saying which.
        save(static.model, static_path, what=what, reference=None,
             data_location=data_location(run, static_path))
    except InferenceTimeLimitError:
        raise  # a run stopped at its limit says so itself, naming the node
    except InferenceError as err:
        raise _inputs_refused(run, summary.inputs, shapes, ranges, err) from err
    except UnsupportedModelError as err:
        left_dynamic = _why_inputs_stay_dynamic(run, model, err, folder)
        # The reference runs with ONNX Runtime's optimizations off, where it does load.
        save(static.model, static_path, what=what, optimization_level="disabled",
             data_location=data_location(run, static_path))
    profiled_path = None
    if run.config.profiles:
        profiled_path = run.scratch_dir / PROFILED_MODEL_FILE
        profiled = _profiled_model(model, shapes, inputs.profile_of_every_input(summary.inputs))
        save(profiled, profiled_path, what="the model with the job's profiles",
             data_location=data_location(run, profiled_path))
    return LoadedModel(static_path=static_path, profiled_path=profiled_path, input_shapes=shapes,
                       input_specs=specs, feeds=feeds, labels=labels,
                       input_ranges=({} if run.dataset_path is not None or split is not None
                                     else ranges),
                       calibration=split,
                       inputs_left_dynamic=left_dynamic,
                       dynamic_path=run.model_path if left_dynamic else None,
                       warnings=tuple(w for w in (non_finite_weights(model),) if w))


def _inputs_refused(run: JobRun, declared: Sequence[TensorSpec],
                    shapes: Mapping[str, tuple[int, ...]], ranges: Mapping[str, InputRange],
                    err: InferenceError) -> InferenceError:
    """The model does not run on the job's inputs: which inputs were made up and how, and the
    job options (and `fuseforge submit` flags) that give it the ones it expects."""
    name = run.model_path.name
    cause = str(err.__cause__ or err).strip().splitlines()[0]
    at = ", ".join(f"{spec.name}={list(shapes[spec.name])}" for spec in declared)
    if run.dataset_path is not None or run.calibration_path is not None:
        return InferenceError(f"Model {name!r} does not run on the job's dataset (input shapes "
                              f"{at}): {cause}. Check that the dataset holds inputs the model "
                              "accepts.")
    advice = []
    dynamic = [spec for spec in declared if any(not isinstance(dim, int) for dim in spec.shape)]
    if dynamic:
        advice.append(
            "its dynamic dims were set to " + ", ".join(
                f"{spec.name}={list(shapes[spec.name])} (declared [{_dims(spec)}])"
                for spec in dynamic)
            + "; give the shapes it runs at with input_shapes (fuseforge submit --input-shape "
            f"{dynamic[0].name}=D1,D2,...)")
    integral = [spec.name for spec in declared if spec.dtype.startswith(("int", "uint"))]
    if integral:
        drawn = [f"{input_name} from [{ranges[input_name].low}, {ranges[input_name].high})"
                 if input_name in ranges else f"{input_name} from [0, {DEFAULT_INT_HIGH})"
                 for input_name in integral]
        unranged = [input_name for input_name in integral if input_name not in ranges]
        advice.append(
            f"its integer inputs were drawn at random ({', '.join(drawn)}); give the values a "
            "control input takes with input_ranges (fuseforge submit --input-range "
            f"{(unranged or integral)[0]}=LOW,HIGH)")
    hint = ("; ".join(advice) if advice else
            "give the input shapes it runs at with input_shapes (--input-shape)")
    return InferenceError(
        f"Model {name!r} does not run on the random inputs the job made for it (input shapes "
        f"{at}): {cause}. Without a dataset FuseForge makes the inputs up: {hint}. Or upload "
        "real inputs as a dataset (dataset_id; fuseforge submit --validation DATA.npz).")


def _dims(spec: TensorSpec) -> str:
    return ", ".join("?" if not isinstance(dim, int) else str(dim) for dim in spec.shape)


def _why_inputs_stay_dynamic(run: JobRun, model: onnx.ModelProto,
                             refusal: UnsupportedModelError, data_folder: Path | None) -> str:
    """Why an onnxruntime job's engine keeps the upload's dynamic inputs: ONNX Runtime loads
    the model as uploaded at the engine's level, but not with its inputs fixed (its graph
    optimizations then type-check control-flow branches at those shapes, and a branch the
    model never takes there may not fit them). Raises `refusal` when that is not the case."""
    level = run.ort_check_level
    if level == "disabled":  # ONNX Runtime does not run the engine (`model_check_level`)
        raise refusal
    try:
        check_model_runs(model, what="the uploaded model", optimization_level=level,
                         data_folder=data_folder)
    except (UnsupportedModelError, InferenceError):
        raise refusal from None
    cause = str(refusal.__cause__ or refusal).strip().splitlines()[0]
    return (f"ONNX Runtime cannot load the model at level {level!r} with its inputs fixed at "
            f"the job's shapes ({cause}), but loads it as uploaded: the engine keeps the "
            "model's dynamic inputs, and is validated and timed at the job's shapes.")


def _profiled_model(
    model: onnx.ModelProto,
    shapes: Mapping[str, tuple[int, ...]],
    profiles: Mapping[str, OptimizationProfileSpec],
) -> onnx.ModelProto:
    # Inputs without a profile have a static one at their shape, so they are fixed like the
    # rest; an axis whose profile has min == max is fixed at that size (the shape lies within
    # the profile, so `shapes` holds it).
    return fix_input_shapes_except(model, shapes, {
        name: _varying_axes(profile) for name, profile in profiles.items()})


def _varying_axes(profile: OptimizationProfileSpec) -> list[int]:
    return [axis for axis, (low, high) in enumerate(zip(profile.min, profile.max, strict=True))
            if low != high]
