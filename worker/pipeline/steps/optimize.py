"""Stage `optimize`: run the attempt's fusion passes, then convert to the job's precision."""

import json
from collections.abc import Callable
from dataclasses import replace
from functools import partial

import onnx

from core.reports import AccuracyReport
from optimizer.model.file import write_model_file
from optimizer.model_writer import save_model
from optimizer.optimize import optimize_model
from optimizer.precision import AccuracyBudget, convert_precision, search_precision
from optimizer.registries.backends import BACKENDS
from optimizer.registries.precisions import PRECISIONS, REFERENCE_PRECISION, Precision
from worker.pipeline.results import Attempt, JobRun, LoadedModel, OptimizedModel, PendingArtifact
from worker.pipeline.steps.quantize import quantize_graph
from worker.pipeline.weights_files import data_location, load_for_rewrite, with_data_artifact

__all__ = ["optimize_graph"]

_SEARCH_SAMPLES = 4  # each search step runs the model on these; validation then uses them all


def optimize_graph(run: JobRun, loaded: LoadedModel, attempt: Attempt, *,
                   note: Callable[[str], None] = lambda _: None) -> OptimizedModel:
    """The fused model (fused.onnx, with its report) and, below fp32, its conversion: the
    low-precision graph TensorRT 11 needs (it builds strongly typed networks), or its int8
    quantization (each of whose steps `note` records as an event of the stage)."""
    source, folder = load_for_rewrite(run, loaded.fusion_source)
    quantizes = PRECISIONS[run.config.precision].quantizes
    options = attempt.optimize_options(run.config.backend)
    fused, report = optimize_model(source, replace(options, for_quantization=quantizes),
                                   data_folder=folder)
    fused_path = run.scratch_dir / "fused.onnx"
    # A rewrite that leaves a model ONNX Runtime cannot load or run fails here, not in a
    # later stage (plugin nodes are checked through the standard ops they stand for).
    save = partial(save_model, reference=source, optimization_level=run.ort_check_level,
                   feeds=loaded.feeds[0] if loaded.feeds else None, data_folder=folder)
    save(fused, fused_path, what="the fused model", data_location=data_location(run, fused_path))
    report_path = run.scratch_dir / "fusion_report.json"
    report_path.write_text(json.dumps(report.to_dict(), indent=2))
    artifacts = (*with_data_artifact(run, PendingArtifact("fused.onnx", "optimized_model",
                                                          fused_path)),
                 PendingArtifact("fusion_report.json", "report", report_path))
    precision = run.config.precision
    # A precision the backend's runtime computes in from the fp32 graph (OpenVINO's bf16)
    # needs no conversion: the engine is built from the fused model as it is.
    converts = BACKENDS[run.config.backend].converts_graph(precision)
    if folder is not None and (quantizes or converts):
        # Quantization and precision conversion read every weight: from memory, for now.
        fused = onnx.load(fused_path, format="protobuf")
    if quantizes:
        quantized = quantize_graph(run, loaded, fused, fused_path, note=note)
        return OptimizedModel(fused_path=fused_path, fusion_report=report,
                              engine_source=quantized.engine_source, accuracy=quantized.accuracy,
                              artifacts=(*artifacts, *quantized.artifacts),
                              engine_precision=None if quantized.shipped_int8 else REFERENCE_PRECISION)
    if not converts:
        return OptimizedModel(fused_path=fused_path, fusion_report=report, engine_source=fused_path,
                              accuracy=AccuracyReport(), artifacts=artifacts)
    converted, accuracy = _at_precision(run, loaded, fused, precision)
    engine_source = run.scratch_dir / f"model.{precision}.onnx"
    location = data_location(run, engine_source)
    if BACKENDS[run.config.backend].ort_runs_engines:
        save(converted, engine_source, what=f"the fused model at {precision}",
             data_location=location)
    else:
        # The backend's own builder compiles this graph (TensorRT's); ONNX Runtime's CPU
        # kernels lack most bf16/fp16 ops, so loading it there proves nothing (fused.onnx,
        # its fp32 form, was checked).
        write_model_file(converted, engine_source, data_location=location)
    return OptimizedModel(
        fused_path=fused_path, fusion_report=report, engine_source=engine_source,
        accuracy=accuracy,
        artifacts=(*artifacts, *with_data_artifact(run, PendingArtifact(
            engine_source.name, "optimized_model", engine_source))))


def _at_precision(run: JobRun, loaded: LoadedModel, fused: onnx.ModelProto, precision: Precision
                  ) -> tuple[onnx.ModelProto, AccuracyReport]:
    """The converted graph and its report; with `precision_search`, the fewest extra fp32 nodes
    that keep it within the accuracy budget."""
    accuracy = AccuracyReport()
    if run.config.precision_search:
        result = search_precision(
            fused, loaded.feeds[:_SEARCH_SAMPLES], precision=precision,
            budget=AccuracyBudget(**run.config.accuracy_budget.model_dump(
                exclude={"max_accuracy_drop"})),  # int8 only: the config refuses it here
        )
        accuracy.precision_search = result.to_dict()
        converted, report = result.model, result.report
    else:
        converted, report = convert_precision(fused, precision)
    accuracy.precision = report.to_dict()
    return converted, accuracy
