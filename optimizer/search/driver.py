"""Run a search: build and judge each candidate in turn, then race the ones within budget.

Resumable by design: the caller passes the candidates it already recorded (a search whose
worker died resumes with them) and records each new one through `on_finished` as soon as it
is judged, so a lost worker costs at most the candidate it was on. Those resumed are not built
again to be judged; only the ones that go to the race are opened again (`reopen`).

The time budget covers both phases: no candidate starts building once `build_share` of it
is spent (those left are "not tried", saying so), and the race stops at the budget's end.
`stopped()` is the caller's cancel check, asked before each candidate and after each round.

A candidate its own step judged slower before any race (an int8 form measured no faster than
fp32) takes the rest of its family with it: the later candidates of the same backend,
precision and thread count (its other forms: int8 dynamic after static) are not tried, saying
why, since the first of a family in the plan is its likeliest winner. Another thread count is
another race (int8's gain can show at one thread and hide at two), so it is still tried.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass, field, replace

from optimizer.registries.backends import Backend
from optimizer.registries.precisions import Precision
from optimizer.search.candidates import Candidate, CandidatePlan
from optimizer.search.decision import CandidateOutcome, Outcome, SearchDecision, decide
from optimizer.search.race import RaceOptions, RaceResult, race

__all__ = ["Evaluated", "SearchOptions", "SearchResult", "SearchStopped", "run_search"]

# A context that opens a candidate's engine: inside it, one call runs it once on the batch.
Opener = Callable[[], AbstractContextManager[Callable[[], object]]]
_Family = tuple[Backend | None, Precision, int | None]


class SearchStopped(Exception):
    """`stopped()` said so (the job was cancelled); what was recorded stays recorded."""


@dataclass(frozen=True)
class Evaluated:
    """A candidate built and judged: its outcome, and how to open its engine when it is
    `TIMED` (within the accuracy budget, so it races)."""

    outcome: CandidateOutcome
    open: Opener | None = None


@dataclass(frozen=True)
class SearchOptions:
    time_budget_s: float = 600.0
    build_share: float = 0.75  # of the budget, the most building and judging may take
    race: RaceOptions = field(default_factory=RaceOptions)


@dataclass(frozen=True)
class SearchResult:
    decision: SearchDecision
    outcomes: tuple[CandidateOutcome, ...]
    race: RaceResult | None  # None: nothing was within budget to race
    resumed: tuple[str, ...]  # candidates recorded before this run, not built again


def run_search(plan: CandidatePlan, *, evaluate: Callable[[Candidate], Evaluated],
               reference: Opener | Mapping[str, Opener], reopen: Callable[[Candidate], Opener],
               recorded: Mapping[str, CandidateOutcome] | None = None,
               on_finished: Callable[[CandidateOutcome], None] = lambda outcome: None,
               stopped: Callable[[], bool] = lambda: False,
               options: SearchOptions = SearchOptions(),
               clock: Callable[[], float] = time.monotonic,
               requests: Callable[[Candidate], int] = lambda candidate: 1,
               original_of: Callable[[Candidate], str] | None = None,
               original_requests: Mapping[str, int] | None = None) -> SearchResult:
    """Judge every candidate of `plan` not `recorded`, race those `TIMED`, and decide.
    `requests(candidate)`: how many requests one call of its opened engine serves at once;
    `reference`: the original, or the ways it runs (at each thread count), each candidate
    raced against `reference[original_of(candidate)]` (serving `original_requests[key]`
    requests a call, as its candidates do). With `options.race.original_competes`
    the original may win the decision (decision.py).

    Raises:
        SearchStopped: `stopped()` turned true.
    """
    recorded = recorded or {}
    started = clock()
    build_deadline = started + options.time_budget_s * options.build_share
    outcomes: list[CandidateOutcome] = []
    openers: dict[str, Opener] = {}
    lost: dict[_Family, CandidateOutcome] = {}  # a family's member its own step found slower
    for candidate in plan.candidates:
        if stopped():
            raise SearchStopped
        family = (candidate.backend, candidate.precision, candidate.threads)
        if candidate.name in recorded:
            outcome = recorded[candidate.name]
            if outcome.outcome is Outcome.TIMED:
                openers[candidate.name] = reopen(candidate)
        elif family in lost:
            outcome = _family_lost(candidate, lost[family])
            on_finished(outcome)
        elif clock() >= build_deadline:
            outcome = CandidateOutcome(candidate, Outcome.NOT_TRIED, reason=(
                f"not tried: the search's time budget ({options.time_budget_s:g} s) left no "
                "time to build it"))
            on_finished(outcome)
        else:
            evaluated = evaluate(candidate)
            outcome = evaluated.outcome
            if outcome.outcome is Outcome.TIMED and evaluated.open is not None:
                openers[candidate.name] = evaluated.open
            on_finished(outcome)
        if outcome.outcome is Outcome.SLOWER:
            lost.setdefault(family, outcome)
        outcomes.append(outcome)
    by_name = {c.name: c for c in plan.candidates}
    served = {name: requests(by_name[name]) for name in openers}
    originals = reference if isinstance(reference, Mapping) else {"": reference}
    theirs = {name: original_of(by_name[name]) if original_of else next(iter(originals))
              for name in openers}
    raced = (_race(openers, originals, theirs, options, started, stopped, served,
                   original_requests or {}) if openers else None)
    decision = decide(outcomes, raced.standings if raced else {}, plan.refused,
                      original_ships=options.race.original_competes)
    resumed = tuple(c.name for c in plan.candidates if c.name in recorded)
    return SearchResult(decision, tuple(outcomes), raced, resumed)


def _family_lost(candidate: Candidate, first: CandidateOutcome) -> CandidateOutcome:
    return CandidateOutcome(candidate, Outcome.NOT_TRIED, reason=(
        f"not tried: {first.candidate.name}, the likeliest winner of its family "
        f"({first.candidate.precision} on this backend at these threads), already lost before "
        "the race "
        f"({first.reason or 'slower'}); this one cannot be faster"))


def _race(openers: Mapping[str, Opener], originals: Mapping[str, Opener],
          theirs: Mapping[str, str], options: SearchOptions, started: float,
          stopped: Callable[[], bool], served: Mapping[str, int],
          original_requests: Mapping[str, int]) -> RaceResult:
    def each_round(done: int, still_in: Sequence[str]) -> None:
        if stopped():
            raise SearchStopped

    deadline = started + options.time_budget_s
    needed = {key: opener for key, opener in originals.items() if key in theirs.values()}
    with _opened(openers, needed) as (runs, original):
        return race(runs, original, replace(options.race, deadline=deadline),
                    on_round=each_round, requests=served, original_of=theirs,
                    original_requests={key: count for key, count in original_requests.items()
                                       if key in needed})


@contextmanager
def _opened(openers: Mapping[str, Opener], originals: Mapping[str, Opener]
            ) -> Iterator[tuple[dict[str, Callable[[], object]], dict[str, Callable[[], object]]]]:
    """The originals first (the first's timing lock then covers every round), then the
    candidates."""
    with ExitStack() as stack:
        original = {key: stack.enter_context(opener()) for key, opener in originals.items()}
        runs = {name: stack.enter_context(opener()) for name, opener in openers.items()}
        yield runs, original
