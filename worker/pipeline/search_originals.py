"""The originals a search races its candidates against: the job's own, as its backend's
benchmark times it (ONNX Runtime's default level, or TensorRT's reference engine), and one at
each thread count a candidate runs at, so each candidate is judged against the original run
as it is run (its threads; in a throughput search, as many requests at once).

An original at a thread count is its candidate's backend's reference, built from the
candidate's recipe less what makes it a candidate (precision, passes, quantization, level):
its backend and threads stay, under whatever name that backend takes them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from optimizer.search.candidates import Candidate, CandidatePlan
from optimizer.search.driver import Opener
from optimizer.search.streams import concurrent_calls
from worker.pipeline.backends.base import JobBackend
from worker.pipeline.results import JobRun, LoadedModel
from worker.pipeline.stages import ProgressSpan

__all__ = ["SearchOriginals", "original_key", "original_label", "search_originals"]

# The recipe fields that make a candidate other than the original (the rest: where it runs).
_CANDIDATE_FIELDS = frozenset({"precision", "passes", "quantization", "ort_optimization_level"})


@dataclass(frozen=True)
class SearchOriginals:
    """The openers of a search's originals by key (`original_key`), and the requests each
    serves a call."""

    openers: dict[str, Opener]
    requests: dict[str, int]


def original_key(candidate: Candidate) -> str:
    """Which original `candidate` races against: the one at its thread count ("" where it
    runs at the job's own)."""
    return "" if candidate.threads is None else f"@{candidate.threads}t"


def original_label(key: str) -> str:
    """How the report names the original of `key`: "original", "original@1t"."""
    return f"original{key}" if key else "original"


def search_originals(run: JobRun, plan: CandidatePlan, loaded: LoadedModel,
                     feed: dict[str, np.ndarray], span: ProgressSpan, *,
                     job_backend: JobBackend[Any],
                     backend_for: Callable[[JobRun], JobBackend[Any]],
                     requests: Callable[[Candidate], int]) -> SearchOriginals:
    """The originals `plan`'s candidates race against; the job's own (`job_backend`'s) takes
    the backend's timing lock, held for the whole race (the race opens it first)."""
    served = {original_key(c): requests(c) for c in plan.candidates}
    openers = {"": _reference_opener(job_backend, loaded, feed, span, lock=job_backend,
                                     requests=served.get("", 1))}
    for candidate in plan.candidates:
        key = original_key(candidate)
        if key in openers:
            continue
        at = replace(run, config=run.config.candidate_config(
            {name: value for name, value in candidate.overrides().items()
             if name not in _CANDIDATE_FIELDS}))
        openers[key] = _reference_opener(backend_for(at), loaded, feed, span, lock=None,
                                         requests=served[key])
    return SearchOriginals(openers, served)


def _reference_opener(backend: JobBackend[Any], loaded: LoadedModel,
                      feed: dict[str, np.ndarray], span: ProgressSpan, *,
                      lock: JobBackend[Any] | None, requests: int) -> Opener:
    """The original, as `backend`'s benchmark times it, `requests` at once a call; holding
    `lock`'s timing lock while open."""
    @contextmanager
    def opened() -> Iterator[Callable[[], object]]:
        reference = backend.benchmark_reference(loaded, span)
        with lock.timing_lock() if lock is not None else nullcontext(), \
                reference.open() as runner, \
                concurrent_calls(lambda: runner.infer(feed), requests) as call:
            yield call
    return opened
