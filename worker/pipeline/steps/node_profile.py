"""Stage `profile`: where the engine's time goes, node by node, beside the original's, and
which original nodes each hot spot came from (optimizer/measure/hot_spots.py).

Every job runs it, on the benchmark's input batch, after the benchmark (so it never skews
those figures). A backend that cannot profile says why, and the report says so.
"""

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import onnx

from optimizer.errors import OptimizerError
from optimizer.fusion_report import FusionReport
from optimizer.measure.hot_spots import ProfileInputs, profile_report
from optimizer.measure.memory_bandwidth import memory_bandwidth_gb_s
from optimizer.measure.provenance import named_graph, node_ids, node_provenance
from worker.pipeline.backends.base import JobBackend
from worker.pipeline.results import BuiltEngine, JobRun, LoadedModel, OptimizedModel
from worker.pipeline.steps.benchmark import benchmark_setup

__all__ = ["profile_engine_nodes"]

logger = logging.getLogger(__name__)


def profile_engine_nodes(run: JobRun, backend: JobBackend[Any], loaded: LoadedModel,
                         optimized: OptimizedModel, engine: BuiltEngine[Any],
                         quantization: Mapping[str, Any] | None) -> dict[str, Any]:
    """The profile report, or `{"skipped": why}` where the backend cannot profile or the
    profiler fails (a profile explains a job; it never fails one)."""
    _, feed = benchmark_setup(run, loaded)
    try:
        with backend.timing_lock():  # a GPU's other jobs would skew the layer times
            profiles = backend.node_profiles(loaded, optimized, engine, feed)
    except OptimizerError as err:
        logger.warning("job %s: the node profile failed: %s", run.job_id, err)
        return {"skipped": f"the profiler failed: {err}"}
    if isinstance(profiles, str):
        return {"skipped": profiles}
    source = named_graph(loaded.fusion_source)
    report = profile_report(ProfileInputs(
        original=profiles.original, engine=profiles.engine,
        original_op_types=dict(zip(node_ids(source), (n.op_type for n in source.node),
                                   strict=True)),
        original_provenance=profiles.original_provenance,
        engine_provenance=profiles.engine_provenance,
        refusals=_refusals(optimized.fusion_report),
        float_reasons=_float_reasons(source, optimized.fused_path, quantization),
        bandwidth_gb_s=memory_bandwidth_gb_s()))
    return {"profiler": profiles.profiler,
            "input_shapes": {name: list(shape) for name, shape in loaded.input_shapes.items()},
            **report}



def _refusals(fusion: FusionReport) -> dict[str, str]:
    """Original node -> the first refusal a rule's check gave at it."""
    refusals: dict[str, str] = {}
    for rule in fusion.rules:
        for refusal in rule.refusals:
            refusals.setdefault(refusal.node, f"{rule.rule}: {refusal.reason}")
    return refusals


def _float_reasons(source: onnx.GraphProto, fused_path: Path,
                   quantization: Mapping[str, Any] | None) -> dict[str, str]:
    """An int8 job's fused nodes left in float, as their original nodes, with why."""
    precisions = (quantization or {}).get("node_precisions") or {}
    in_float = {row["name"]: row.get("reason") or "left in float"
                for row in precisions.get("nodes", ()) if row.get("precision") == "float"}
    if not in_float:
        return {}
    origins = node_provenance(source, named_graph(fused_path))
    return {origin: reason for node, reason in in_float.items()
            for origin in origins.get(node, ())}
