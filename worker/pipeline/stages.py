"""The stages a job moves through, in order, and the share of the job's progress each owns.

A stage starts at its `starts_at` and ends where the next begins; work inside a stage (an
engine build relaying TensorRT's progress) moves the job's progress within that span.
"""

from dataclasses import dataclass

__all__ = [
    "ABLATION",
    "BENCHMARK",
    "BUILD_ENGINE",
    "LOAD",
    "OPTIMIZE",
    "PROFILE",
    "SEARCH",
    "STAGES",
    "STORE",
    "VALIDATE",
    "ProgressSpan",
    "span_of",
]

LOAD, SEARCH = "load", "search"
OPTIMIZE, BUILD_ENGINE, VALIDATE = "optimize", "build_engine", "validate"
BENCHMARK, PROFILE, ABLATION, STORE = "benchmark", "profile", "ablation", "store"

# (stage, the job's progress when it starts); `search` and `ablation` run only when the job asks
# for them (a search job then builds its winner from `optimize` on).
STAGES: tuple[tuple[str, float], ...] = (
    (LOAD, 0.02),
    (SEARCH, 0.05),
    (OPTIMIZE, 0.1),
    (BUILD_ENGINE, 0.2),
    (VALIDATE, 0.4),
    (BENCHMARK, 0.6),
    (PROFILE, 0.72),
    (ABLATION, 0.78),
    (STORE, 0.9),
)


@dataclass(frozen=True)
class ProgressSpan:
    """The job's progress from `start` to `end` while one piece of work runs."""

    start: float
    end: float

    def part(self, begin: float, finish: float) -> "ProgressSpan":
        """The sub-span from fraction `begin` to `finish` of this one."""
        width = self.end - self.start
        return ProgressSpan(self.start + width * begin, self.start + width * finish)

    def as_tuple(self) -> tuple[float, float]:
        return self.start, self.end


def span_of(stage: str) -> ProgressSpan:
    """The progress `stage` owns: from its start to the next stage's (or to 1.0)."""
    starts = dict(STAGES)
    names = [name for name, _ in STAGES]
    at = names.index(stage)
    end = STAGES[at + 1][1] if at + 1 < len(STAGES) else 1.0
    return ProgressSpan(starts[stage], end)
