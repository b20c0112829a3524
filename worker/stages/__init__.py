"""Pipeline stages in the order they run; each takes the JobContext and fills in its part."""

from collections.abc import Callable
from typing import Any

from worker.context import JobContext
from worker.stages.ablation import benchmark_ablation
from worker.stages.benchmark import benchmark_variants
from worker.stages.build_engine import build_engine
from worker.stages.load import load_model
from worker.stages.optimize import optimize_graph
from worker.stages.validate import validate_engine

__all__ = ["STAGES", "Stage", "stages_for"]

Stage = Callable[[JobContext], None]


def _always(_: dict[str, Any]) -> bool:
    return True


# (name, progress when the stage starts, runs for this job config?, function)
STAGES: tuple[tuple[str, float, Callable[[dict[str, Any]], bool], Stage], ...] = (
    ("load", 0.05, _always, load_model),
    ("optimize", 0.1, _always, optimize_graph),
    ("build_engine", 0.2, _always, build_engine),
    ("validate", 0.4, _always, validate_engine),
    ("benchmark", 0.6, _always, benchmark_variants),
    ("ablation", 0.75, lambda config: bool(config.get("ablation")), benchmark_ablation),
)


def stages_for(config: dict[str, Any]) -> list[tuple[str, float, Stage]]:
    """The stages this job runs, in order."""
    return [(name, progress, stage) for name, progress, runs, stage in STAGES if runs(config)]
