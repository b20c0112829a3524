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
    "SEARCH_ENDS_AT",
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


# A search job's search is most of its run (it builds and times every candidate): it owns the
# progress up to SEARCH_ENDS_AT, and the stages after it (the winner's build) share the rest in
# the table's proportions. Without this the search held 5-10% and sat at 5% for hours.
SEARCH_ENDS_AT = 0.8


def span_of(stage: str, *, search: bool = False) -> ProgressSpan:
    """The progress `stage` owns: from its start to the next stage's (or to 1.0); `search`: in
    a job that runs the search stage."""
    starts = dict(STAGES)
    names = [name for name, _ in STAGES]
    at = names.index(stage)
    end = STAGES[at + 1][1] if at + 1 < len(STAGES) else 1.0
    span = ProgressSpan(starts[stage], end)
    after_search = starts[SEARCH] < span.start
    if not search or not (stage == SEARCH or after_search):
        return span
    if stage == SEARCH:
        return ProgressSpan(span.start, SEARCH_ENDS_AT)
    rest = span_of(SEARCH).end  # where the stages after the search start in the table
    scale = (1.0 - SEARCH_ENDS_AT) / (1.0 - rest)
    return ProgressSpan(SEARCH_ENDS_AT + (span.start - rest) * scale,
                        SEARCH_ENDS_AT + (span.end - rest) * scale)
