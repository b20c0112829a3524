"""Ship the user's model unchanged when no engine beats it, on a backend that can
(`JobBackend.original_backend`): every attempt failed validation (engine_attempts.py), or the
benchmark measured the engine slower than the original (run.py). A job never ships an engine
slower than what its user already runs.

The original's engine (its bytes as engine.onnx, a manifest at ONNX Runtime's default level)
replaces the engine's files, is validated so the job's verdict is on what ships, and the why
goes to `JobOutcome.original_shipped` and the accuracy report's `original_shipped`.
"""

from collections.abc import Callable, Sequence
from typing import Any

from core.db.models import BenchmarkVariant
from optimizer.measure.benchmark import BenchmarkResult
from optimizer.measure.stats import SLOWER
from worker.pipeline.backends.base import JobBackend
from worker.pipeline.results import BuiltEngine, JobOutcome, JobRun, LoadedModel
from worker.pipeline.steps.validate import validate_original

__all__ = ["ENGINE_KINDS", "MIN_ROUNDS", "ship_original", "slower_than_original"]

ENGINE_KINDS = frozenset({"engine", "engine_data", "manifest"})  # the files the original replaces
# The fewest timed rounds whose "slower" verdict replaces the engine. The interval of a median
# of 3 rounds spans their extremes, so a tie lands all 3 on one side one job in eight (seen on
# a loaded 2-core machine with the tests' 3-round benchmarks); a job's default is 30 rounds.
MIN_ROUNDS = 10


def slower_than_original(comparison: Sequence[BenchmarkResult]) -> str | None:
    """Why the engine must not ship, when the benchmark's verdict on it is "slower" (its
    speed-up's whole interval below 1) over at least MIN_ROUNDS rounds: e.g. "the engine
    measured 0.82x the original's speed (0.78-0.86)"; None otherwise (the records still say
    "slower" where a thinner benchmark found it)."""
    for result in comparison:
        if (result.variant == BenchmarkVariant.ENGINE and result.speedup_verdict == SLOWER
                and result.iterations >= MIN_ROUNDS):
            interval = ("" if result.speedup_ci_low is None or result.speedup_ci_high is None
                        else f" ({result.speedup_ci_low:.2f}-{result.speedup_ci_high:.2f})")
            return (f"the engine measured {result.speedup_vs_reference or 0.0:.2f}x the "
                    f"original's speed{interval}")
    return None


def ship_original(run: JobRun, backend: JobBackend[Any], loaded: LoadedModel,
                  outcome: JobOutcome, why: str,
                  note: Callable[[str], None]) -> BuiltEngine[Any]:
    """Make the original the job's engine: its files replace the engine's, its verdict the
    engine's, and `why` (one sentence) is recorded; `note` tells the job's events.

    Raises:
        InternalError: the backend cannot ship the original (its `original_backend` is None).
        EngineBuildError: the original cannot be read or loaded at the default level.
    """
    engine = backend.original_engine(loaded)
    for name in [name for name, artifact in outcome.artifacts.items()
                 if artifact.kind in ENGINE_KINDS]:
        del outcome.artifacts[name]
    outcome.add_artifacts(engine.artifacts)
    outcome.reports.engine_report = engine.report  # the replaced engine's described it
    validation = validate_original(run, backend, loaded, engine)
    outcome.validation = validation.report
    outcome.original_shipped = why
    outcome.original_backend = str(backend.original_backend)
    outcome.reports.accuracy().original_shipped = why
    note(f"the original model ships unchanged: {why}")
    return engine
