"""Stage `optimize`, int8 jobs: quantize the fused model within the job's accuracy budget.

The candidates are judged on the job's validation samples (its dataset, else the samples held
apart from the calibration dataset, else seeded random inputs for dynamic quantization) against
the original's outputs, and timed against the fused fp32 model; what ships and why, each node's
precision in the engine and the calibration tables go into the job's accuracy report and
artifacts (optimizer/quantization/search.py says how the search goes).
"""

from collections.abc import Callable
from pathlib import Path

import onnx

from core.job_config import quantization_of
from core.reports import AccuracyReport
from optimizer.model.file import write_model_file
from optimizer.precision import run_outputs
from optimizer.quantization.calibration import CalibrationTable, calibrate, graph_sha256
from optimizer.quantization.search import QuantizationRequest, quantize_within_budget
from optimizer.registries.backends import BACKENDS, load_dotted
from optimizer.registries.precisions import PRECISIONS
from optimizer.registries.quantization import CalibrationMethod
from worker.pipeline.results import JobRun, LoadedModel, PendingArtifact
from worker.pipeline.steps.validate import job_tolerances
from worker.pipeline.weights_files import data_location, with_data_artifact

__all__ = ["QuantizedGraph", "quantize_graph"]


class QuantizedGraph:
    """What the int8 step leaves: the engine's source (the int8 model, or the fused fp32 one
    when that ships), the report, and the files to keep."""

    def __init__(self, engine_source: Path, accuracy: AccuracyReport,
                 artifacts: tuple[PendingArtifact, ...], *, shipped_int8: bool) -> None:
        self.engine_source, self.accuracy, self.artifacts = engine_source, accuracy, artifacts
        self.shipped_int8 = shipped_int8


def quantize_graph(run: JobRun, loaded: LoadedModel, fused: onnx.ModelProto, fused_path: Path,
                   *, note: Callable[[str], None]) -> QuantizedGraph:
    """The int8 engine source of `fused` (saved as fused_path), or fused_path itself when int8
    is out of budget or not faster; each step of the search goes to `note` (the job's events)."""
    settings = quantization_of(run.config)
    backend = BACKENDS[run.config.backend]
    request = QuantizationRequest(
        mode=settings.mode, method=settings.method, per_channel=settings.per_channel,
        keep_nodes=tuple(settings.keep_nodes), keep_op_types=tuple(settings.keep_op_types),
        flavours=backend.quant_flavours[run.config.precision],
        max_kept_nodes=settings.max_kept_nodes,
        allow_dynamic=PRECISIONS[run.config.precision].has_dynamic_form, precision=run.config.precision,
        # Timed at the threads the engine will run at: int8's gain differs with them.
        level=run.ort_check_level, threads=run.config.cpu_threads,
        # Judged and timed in the backend's own runtime where its spec names one.
        candidate_runner=backend.candidate_runner,
        # An engine ONNX Runtime does not run (TensorRT's) is as fast as its own device: the
        # benchmark stage times it there; ONNX Runtime's CPU time says nothing of it.
        time_candidates=backend.times_quantized_candidates)
    calibration = loaded.calibration.calibration if loaded.calibration else None
    tables: list[CalibrationTable] = []

    reused: list[str] = []

    def table(method: CalibrationMethod, graph: onnx.ModelProto) -> CalibrationTable:
        """This run's table, else the stored one (an earlier job's), else a new calibration,
        then stored for the next job."""
        sha = graph_sha256(graph)
        known = next((t for t in tables if t.method is method and t.graph_sha256 == sha), None)
        if known is not None:
            return known
        assert calibration is not None  # the search asks only with calibration samples
        stored = run.calibrations.find(method, sha, len(calibration)) if run.calibrations else None
        if stored is not None:
            note(f"{run.config.precision}: calibration ({method}) reused: stored by an earlier "
                 "job on this model and dataset")
            reused.append(str(method))
            tables.append(stored)
            return stored
        computed = calibrate(graph, calibration, method)
        if run.calibrations is not None:
            run.calibrations.record(computed)
        tables.append(computed)
        return computed

    result = quantize_within_budget(
        fused, request=request, tolerances=job_tolerances(run.config),
        validation_feeds=loaded.feeds,
        reference=run_outputs(onnx.load(loaded.static_path), loaded.feeds),
        calibration_feeds=calibration, tables=table, labels=loaded.labels,
        progress=note)
    report = result.to_dict()
    if loaded.calibration is not None:
        report["samples"] = loaded.calibration.to_dict()
    report["calibrations_reused"] = reused
    artifacts = []
    for computed in tables:
        path = run.scratch_dir / f"calibration.{computed.method}.json"
        computed.write(path)
        artifacts.append(PendingArtifact(path.name, "report", path))
    engine_source = fused_path
    if result.model is not None:
        engine_source = run.scratch_dir / "model.int8.onnx"
        write_model_file(result.model, engine_source,
                         data_location=data_location(run, engine_source))
        artifacts.extend(with_data_artifact(run, PendingArtifact(
            engine_source.name, "optimized_model", engine_source)))
        if backend.node_precisions is not None:
            report["node_precisions"] = load_dotted(backend.node_precisions)(
                fused, engine_source, level=run.ort_check_level,
                kept=result.kept_reasons).to_dict()
    note(f"{run.config.precision}: {result.shipped} ships: {result.why}")
    return QuantizedGraph(engine_source, AccuracyReport(quantization=report), tuple(artifacts),
                          shipped_int8=result.model is not None)

