"""An onnxruntime job's per-node profiles: the original as the benchmark times it (the upload at
ONNX Runtime's default level) and the engine at its manifest's options, each session's nodes
traced back to the model the passes rewrote.

The engine's nodes reach the original in three hops, composed: the fused (or quantized) model's
origin tags, then the engine file ONNX Runtime wrote from it, then the session's own graph of
that file (optimizer/measure/provenance.py).
"""

from pathlib import Path
from typing import Any

import numpy as np
import onnx

from optimizer.backends.onnxruntime.build import OrtEngine, engine_session_options
from optimizer.measure.node_profile import NodeProfile, ProfiledSession, profile_onnxruntime
from optimizer.measure.provenance import (
    Provenance,
    compose,
    name_unnamed_nodes,
    named_graph,
    node_provenance,
)
from optimizer.model.external_data import external_tensors
from optimizer.model.file import write_model_file
from worker.pipeline.backends.base import PROFILE_RUNS, NodeProfiles
from worker.pipeline.results import BuiltEngine, JobRun, LoadedModel, OptimizedModel

__all__ = ["ort_node_profiles", "original_node_profile"]


def ort_node_profiles(run: JobRun, loaded: LoadedModel, optimized: OptimizedModel,
                      engine: BuiltEngine[OrtEngine], feed: dict[str, Any]) -> NodeProfiles:
    """Raises:
        EngineBuildError, InferenceError: ONNX Runtime cannot load or run a model to profile it.
    """
    given = {name: np.asarray(value) for name, value in feed.items()}
    runs = max(1, min(PROFILE_RUNS, run.config.benchmark.iterations))
    work = run.scratch_dir / "profile"
    work.mkdir(exist_ok=True)
    original, original_provenance = original_node_profile(run, loaded, given, runs=runs)
    engine_file, options = engine_session_options(engine.engine.manifest_path)
    built = profile_onnxruntime(_named(engine_file, work), given, runs=runs, **options)
    source, fused = named_graph(loaded.fusion_source), named_graph(optimized.engine_source)
    engine_hops = compose(node_provenance(source, fused),
                          node_provenance(fused, named_graph(engine_file)))
    threads = options["intra_op_threads"]
    return NodeProfiles(
        original=original, engine=built.profile,
        original_provenance=original_provenance,
        engine_provenance=compose(engine_hops, _through_session(named_graph(engine_file), built)),
        profiler=(f"ONNX Runtime's profiler, {runs} runs, "
                  f"{'default' if threads is None else threads} intra-op threads"))



def original_node_profile(run: JobRun, loaded: LoadedModel, feed: dict[str, np.ndarray], *,
                          runs: int) -> tuple[NodeProfile, Provenance]:
    """The original as the benchmark times it (the upload at ONNX Runtime's default level, the
    job's threads), node by node, each session node traced to the model the passes rewrote.

    Raises:
        EngineBuildError, InferenceError: ONNX Runtime cannot load or run the upload.
    """
    work = run.scratch_dir / "profile"
    work.mkdir(exist_ok=True)
    original = profile_onnxruntime(_named(run.model_path, work), feed, optimization_level="all",
                                   intra_op_threads=run.config.cpu_threads, runs=runs)
    return original.profile, _through_session(named_graph(loaded.fusion_source), original)


def _named(path: Path, work: Path) -> Path:
    """`path`, or a copy in `work` whose unnamed nodes got names (ONNX Runtime's profiler
    would name them after indices no saved graph shows)."""
    model = onnx.load(str(path), load_external_data=False)
    if not name_unnamed_nodes(model.graph):
        return path
    copy = work / f"named-{path.name}"
    # A model with data files: the copy gets its own, the tensors copied across in chunks.
    external = any(external_tensors(model))
    write_model_file(model, copy, data_location=f"{copy.name}.data" if external else None,
                     data_folder=path.parent if external else None)
    return copy


def _through_session(model: onnx.GraphProto, session: ProfiledSession) -> Provenance:
    if session.session_graph is None:
        return {}
    return node_provenance(model, session.session_graph)
