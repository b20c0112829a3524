"""What the pipeline asks of a job's backend, behind one interface: build the engine, open
runners on it, give the benchmark its reference, and say which fallbacks exist (and whether
the original itself can ship).

Two strategies implement it: `OnnxRuntimeBackend` (CPU workers) and `TensorRTBackend` (GPU
workers, builds isolated per GPU). The stages never branch on the backend's name.
"""

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, NoReturn, Protocol, TypeVar

from optimizer.backends.runner import Runner
from optimizer.measure.ablation import RunnerFor
from optimizer.measure.node_profile import NodeProfile
from optimizer.measure.provenance import Provenance
from optimizer.registries.backends import Backend
from worker.pipeline.results import (
    Attempt,
    BuiltEngine,
    LoadedModel,
    OptimizedModel,
    Validation,
)
from worker.pipeline.stages import ProgressSpan

__all__ = ["PROFILE_RUNS", "BenchmarkReference", "JobBackend", "NodeProfiles", "SweepEngine"]

PROFILE_RUNS = 10  # profiled runs of each model in stage `profile` (at most the benchmark's)

EngineT = TypeVar("EngineT")


@dataclass(frozen=True)
class BenchmarkReference:
    """What the engine is timed against: the unfused model on the same backend."""

    open: Callable[[], AbstractContextManager[Runner]]
    engine_metadata: dict[str, Any] | None = None  # a reference engine's, for the engine report
    # Timed alongside as "original_unoptimized", where the backend has such a variant (ONNX
    # Runtime: the original with every optimization off, the old and flattering reference).
    unoptimized: Callable[[], AbstractContextManager[Runner]] | None = None


@dataclass(frozen=True)
class SweepEngine:
    """The engine at one batch size of a benchmark sweep, and the input shapes it runs at."""

    input_shapes: dict[str, tuple[int, ...]]
    open: Callable[[], AbstractContextManager[Runner]]


@dataclass(frozen=True)
class NodeProfiles:
    """Per-node times of the benchmark's original and of the engine, and the original nodes
    (of the model the passes rewrote) each profiled node came from."""

    original: NodeProfile
    engine: NodeProfile
    original_provenance: Provenance
    engine_provenance: Provenance
    profiler: str  # what measured them, for the report ("ONNX Runtime's profiler, 1 thread")


class JobBackend(Protocol[EngineT]):
    name: Backend
    own_optimizations: str  # what the backend does to any engine itself, for blame messages
    # The backend the user's model ships on, unchanged, when nothing beats it (every attempt
    # fails validation, or the engine measures slower than the original): ONNX Runtime at its
    # default level, what its user already runs, for the CPU backends; None for TensorRT, whose
    # engines are all built (its report then says the engine is slower, as measured).
    original_backend: Backend | None

    def build_engine(self, loaded: LoadedModel, optimized: OptimizedModel, attempt: Attempt,
                     span: ProgressSpan) -> BuiltEngine[EngineT]:
        """Build the engine of `optimized` (replacing an earlier attempt's)."""
        ...

    def open_runner(self, engine: BuiltEngine[EngineT]) -> AbstractContextManager[Runner]:
        """A runner on `engine`, for a `with` block."""
        ...

    def precision_runner(self, engine: BuiltEngine[EngineT]
                         ) -> AbstractContextManager[Runner | None]:
        """A runner that computes at the job's precision, or None where the backend cannot
        (then the converted graph is emulated on the CPU)."""
        ...

    def benchmark_reference(self, loaded: LoadedModel, span: ProgressSpan) -> BenchmarkReference:
        """The unfused model to time the engine against (built within `span` if need be)."""
        ...

    def sweep_engine(self, loaded: LoadedModel, engine: BuiltEngine[EngineT],
                     batch: int) -> SweepEngine | str:
        """The engine at batch size `batch` (the reference runs the same shapes), or why it
        cannot be timed there (a fixed batch dim, a batch outside the engine's profile)."""
        ...

    def node_profiles(self, loaded: LoadedModel, optimized: OptimizedModel,
                      engine: BuiltEngine[EngineT], feed: dict[str, Any]) -> NodeProfiles | str:
        """Profile the original and the engine node by node on `feed`, or say why not."""
        ...

    def timing_lock(self) -> AbstractContextManager[None]:
        """Held while timing, so no other job's work on the same device skews the figures."""
        ...

    def ablation_runner_for(self, loaded: LoadedModel, span: ProgressSpan) -> RunnerFor:
        """Opens a runner on each ablation stage's model."""
        ...

    def original_engine(self, loaded: LoadedModel) -> BuiltEngine[EngineT]:
        """The user's model unchanged, as this backend's engine (replacing an earlier
        attempt's); only where `original_backend` is set."""
        ...

    def fallback_attempts(self, blamed: tuple[str, ...]) -> list[Attempt]:
        """The attempts after a failed validation, most rewrites kept first (attempts.py)."""
        ...

    def raise_no_attempt_passed(self, last: Validation) -> NoReturn:
        """Fail the job when even the last fallback attempt fails validation."""
        ...
