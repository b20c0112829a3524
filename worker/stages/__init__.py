"""Pipeline stages in the order they run; each takes the JobContext and fills in its part."""

from collections.abc import Callable

from worker.context import JobContext
from worker.stages.benchmark import benchmark_variants
from worker.stages.build_engine import build_engine
from worker.stages.load import load_model
from worker.stages.validate import validate_engine

__all__ = ["STAGES", "Stage"]

Stage = Callable[[JobContext], None]

# (name, progress when the stage starts, function)
STAGES: tuple[tuple[str, float, Stage], ...] = (
    ("load", 0.05, load_model),
    ("build_engine", 0.15, build_engine),
    ("validate", 0.45, validate_engine),
    ("benchmark", 0.65, benchmark_variants),
)
