"""An onnxruntime job's engine at another batch size, for the benchmark's batch sweep.

The engine is static at the job's shapes (and its fusions may bake them in), so each batch size
gets its own: the upload fixed at that batch, the validated attempt's rewrites, the job's
precision and the engine's ONNX Runtime level, built like the engine itself. The original runs
as uploaded, so it takes any batch its dynamic batch dim allows. These engines are timed, not
validated again: the sweep measures speed; the job's engine is the one judged.
"""

import shutil
from collections.abc import Callable
from contextlib import AbstractContextManager

import onnx

from core.job_config import DEFAULT_ORT_LEVEL
from optimizer.backends.onnxruntime.build import (
    OrtBuildOptions,
    OrtEngine,
    build_ort_engine,
    runner_for_engine,
)
from optimizer.backends.runner import Runner
from optimizer.model.file import write_model_file
from optimizer.optimize import optimize_model
from optimizer.precision import convert_precision
from optimizer.registries.precisions import PRECISIONS
from optimizer.static_model import static_model
from worker.pipeline.backends.base import SweepEngine
from worker.pipeline.results import Attempt, BuiltEngine, JobRun, LoadedModel
from worker.pipeline.weights_files import data_location, load_for_rewrite

__all__ = ["ort_sweep_engine"]


def ort_sweep_engine(run: JobRun, loaded: LoadedModel, engine: BuiltEngine[OrtEngine],
                     batch: int, *, open_built: Callable[[], AbstractContextManager[Runner]]
                     ) -> SweepEngine | str:
    """The engine at batch size `batch`, or why there is none: the model's batch dim is fixed.
    `open_built` opens the job's own engine, used as is where it already takes `batch`.

    Raises:
        OptimizerError: the upload cannot be fixed, fused or built at this batch size.
    """
    model, folder = load_for_rewrite(run, run.model_path)
    batched = _batch_inputs(model)
    first = next(iter(loaded.input_shapes), None)
    if first is None or first not in batched:
        return (f"the model's batch dim (axis 0 of input {first!r}) is fixed at "
                f"{loaded.batch_size}")
    shapes = {name: (batch, *shape[1:]) if name in batched else shape
              for name, shape in loaded.input_shapes.items()}
    if batch == loaded.batch_size or loaded.inputs_left_dynamic is not None:
        return SweepEngine(input_shapes=shapes, open=open_built)
    attempt = engine.attempt or Attempt.the_jobs_own(run.config)
    fused, _ = optimize_model(static_model(model, shapes, data_folder=folder).model,
                              attempt.optimize_options(run.config.backend), data_folder=folder)
    if PRECISIONS[run.config.precision].converts:
        if folder is not None:  # the conversion reads every weight
            onnx.load_external_data_for_model(fused, str(folder))
        fused, _ = convert_precision(fused, run.config.precision)
    out_dir = run.scratch_dir / "sweep" / f"batch-{batch}"
    shutil.rmtree(out_dir, ignore_errors=True)
    out_dir.mkdir(parents=True)
    source = out_dir / "source.onnx"
    write_model_file(fused, source, data_location=data_location(run, source), data_folder=folder)
    built = build_ort_engine(
        source, out_dir / "engine", input_shapes=shapes,
        options=OrtBuildOptions(optimization_level=attempt.ort_level or DEFAULT_ORT_LEVEL,
                                intra_op_threads=run.config.cpu_threads,
                                flush_denormals=run.config.ort_flush_denormals))
    return SweepEngine(input_shapes=shapes, open=lambda: runner_for_engine(built.manifest_path))


def _batch_inputs(model: onnx.ModelProto) -> set[str]:
    """The graph inputs whose axis 0 is dynamic (a name or no size): those a batch resizes."""
    initializers = {init.name for init in model.graph.initializer}
    names = set()
    for value in model.graph.input:
        if value.name in initializers:
            continue
        dims = value.type.tensor_type.shape.dim
        if dims and not dims[0].HasField("dim_value"):
            names.add(value.name)
    return names
