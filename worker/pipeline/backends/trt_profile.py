"""A tensorrt job's per-node profiles: TensorRT's per-layer profile of the engine and of the
unfused model's engine (the benchmark's reference), each layer mapped by the engine inspector
to the ONNX nodes it computes, and the engine's through the fused model's origin tags to the
model the passes rewrote (optimizer/measure/provenance.py)."""

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np

from optimizer.backends.runner import Runner
from optimizer.backends.tensorrt import TrtEngine
from optimizer.errors import InternalError
from optimizer.measure.layer_profile import (
    LayerProfiledRunner,
    engine_layers,
    tensorrt_layer_profile,
)
from optimizer.measure.node_profile import NodeProfile
from optimizer.measure.provenance import (
    Provenance,
    compose,
    named_graph,
    node_provenance,
)
from worker.pipeline.backends.base import PROFILE_RUNS, NodeProfiles
from worker.pipeline.results import LoadedModel, OptimizedModel

__all__ = ["ReferenceEngine", "tensorrt_node_profiles"]


@dataclass(frozen=True)
class ReferenceEngine:
    engine: TrtEngine
    source: Path  # the model it was built from (the job's model at the job's precision)


def tensorrt_node_profiles(loaded: LoadedModel, optimized: OptimizedModel, engine: TrtEngine,
                           reference: ReferenceEngine, feed: dict[str, Any], *,
                           open_engine: Callable[[TrtEngine], AbstractContextManager[Runner]]
                           ) -> NodeProfiles:
    """Raises:
        InferenceError, EngineBuildError: an engine cannot be loaded or run.
    """
    given = {name: np.asarray(value) for name, value in feed.items()}
    source = named_graph(loaded.fusion_source)
    original, original_layers = _profile(reference.engine, given, open_engine)
    built, built_layers = _profile(engine, given, open_engine)
    return NodeProfiles(
        original=original, engine=built,
        original_provenance=compose(node_provenance(source, named_graph(reference.source)),
                                    original_layers),
        engine_provenance=compose(node_provenance(source, named_graph(optimized.engine_source)),
                                  built_layers),
        profiler=f"TensorRT's per-layer profiler, {PROFILE_RUNS} runs")


def _profile(engine: TrtEngine, feed: dict[str, np.ndarray],
             open_engine: Callable[[TrtEngine], AbstractContextManager[Runner]]
             ) -> tuple[NodeProfile, Provenance]:
    with open_engine(engine) as runner:
        if not hasattr(runner, "profile_layers"):
            raise InternalError(f"the runner of {engine.engine_path.name!r} cannot profile layers")
        return tensorrt_layer_profile(cast(LayerProfiledRunner, runner), feed,
                                      engine_layers(engine.report_path), runs=PROFILE_RUNS)

