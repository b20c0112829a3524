"""The search driver: a resumed search judges only what was not recorded, a spent time budget
leaves candidates "not tried", a cancel stops it with what was recorded kept, an int8
candidate out of the accuracy budget leaves fp32 the winner, and one its own step found slower
leaves the rest of its family untried."""

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace

import pytest

from optimizer.registries.precisions import Precision
from optimizer.registries.quantization import QuantizationMode
from optimizer.search.candidates import Candidate, CandidatePlan
from optimizer.search.decision import CandidateOutcome, Outcome
from optimizer.search.driver import Evaluated, SearchOptions, SearchStopped, run_search
from optimizer.search.race import RaceOptions

INT8 = Candidate("int8-static/all", Precision.INT8, "all", QuantizationMode.STATIC, "all")
FP32 = Candidate("fp32/all", Precision.FP32, "all", ort_level="all")
NONE = Candidate("fp32/none", Precision.FP32, "none", ort_level="all")
PLAN = CandidatePlan((INT8, FP32, NONE))
SECONDS = {INT8.name: 0.001, FP32.name: 0.003, NONE.name: 0.005}
QUICK = SearchOptions(race=RaceOptions(min_rounds=5, max_rounds=12, calls=1))


def _sleeping(seconds: float) -> Callable[[], object]:
    @contextmanager
    def opened() -> Iterator[Callable[[], object]]:
        yield lambda: time.sleep(seconds)
    return opened


def _timed(candidate: Candidate) -> Evaluated:
    return Evaluated(CandidateOutcome(candidate, Outcome.TIMED, accuracy={"cosine": 0.999}),
                     _sleeping(SECONDS[candidate.name]))


def test_a_resumed_search_judges_only_the_candidates_not_recorded() -> None:
    judged: list[str] = []
    finished: list[str] = []
    reopened: list[str] = []

    def evaluate(candidate: Candidate) -> Evaluated:
        judged.append(candidate.name)
        return _timed(candidate)

    def reopen(candidate: Candidate) -> Callable[[], object]:
        reopened.append(candidate.name)
        return _sleeping(SECONDS[candidate.name])

    recorded = {INT8.name: CandidateOutcome(INT8, Outcome.TIMED, accuracy={"cosine": 0.995})}
    result = run_search(PLAN, evaluate=evaluate, reference=_sleeping(0.003), reopen=reopen,
                        recorded=recorded, on_finished=lambda o: finished.append(o.candidate.name),
                        options=QUICK)
    assert judged == finished == [FP32.name, NONE.name]
    assert reopened == [INT8.name] and result.resumed == (INT8.name,)
    assert result.decision.winner == INT8.name


def test_candidates_past_the_build_share_of_the_time_budget_are_not_tried() -> None:
    now = [0.0]

    def evaluate(candidate: Candidate) -> Evaluated:
        now[0] += 50.0  # each build takes 50 s of a 100 s budget (75 s for building)
        return _timed(candidate)

    result = run_search(PLAN, evaluate=evaluate, reference=_sleeping(0.003),
                        reopen=lambda c: _sleeping(SECONDS[c.name]), clock=lambda: now[0],
                        options=SearchOptions(time_budget_s=100, race=QUICK.race))
    outcomes = {o.candidate.name: o for o in result.outcomes}
    assert outcomes[NONE.name].outcome is Outcome.NOT_TRIED
    assert "time budget (100 s)" in (outcomes[NONE.name].reason or "")
    assert result.race is not None and set(result.race.standings) == {INT8.name, FP32.name}


def test_a_cancel_stops_the_search_and_keeps_what_was_recorded() -> None:
    finished: list[str] = []
    result_box: list[int] = []

    def stopped() -> bool:
        return len(finished) >= 1

    with pytest.raises(SearchStopped):
        run_search(PLAN, evaluate=_timed, reference=_sleeping(0.003),
                   reopen=lambda c: _sleeping(SECONDS[c.name]),
                   on_finished=lambda o: finished.append(o.candidate.name), stopped=stopped,
                   options=QUICK)
        result_box.append(1)
    assert finished == [INT8.name] and not result_box


def test_int8_out_of_the_accuracy_budget_leaves_fp32_the_winner() -> None:
    def evaluate(candidate: Candidate) -> Evaluated:
        if candidate.precision is Precision.INT8:
            return Evaluated(CandidateOutcome(candidate, Outcome.OUT_OF_ACCURACY_BUDGET,
                                              reason="cosine 0.93 < min_cosine 0.99",
                                              accuracy={"cosine": 0.93}))
        return _timed(candidate)

    result = run_search(PLAN, evaluate=evaluate, reference=_sleeping(0.003),
                        reopen=lambda c: _sleeping(SECONDS[c.name]), options=QUICK)
    assert result.decision.winner == FP32.name
    rows = {row["name"]: row for row in result.decision.rows}
    assert rows[INT8.name]["outcome"] == "out_of_accuracy_budget"
    assert rows[NONE.name]["outcome"] == "slower"


def test_a_candidate_its_own_step_found_slower_takes_its_family_at_its_threads_with_it() -> None:
    dynamic = Candidate("int8-dynamic/all", Precision.INT8, "all", QuantizationMode.DYNAMIC,
                        "all")
    at_one = replace(INT8, name="int8-static/all@1t", threads=1)
    judged: list[str] = []

    def evaluate(candidate: Candidate) -> Evaluated:
        judged.append(candidate.name)
        if candidate is INT8:
            return Evaluated(CandidateOutcome(candidate, Outcome.SLOWER, reason=(
                "the fp32 model would ship: int8 ran at 1.2x the fp32 model's time")))
        return Evaluated(CandidateOutcome(candidate, Outcome.TIMED),
                         _sleeping(seconds[candidate.name]))

    seconds = {**SECONDS, at_one.name: 0.002}
    result = run_search(CandidatePlan((INT8, at_one, dynamic, FP32)), evaluate=evaluate,
                        reference={"": _sleeping(0.003), "@1t": _sleeping(0.003)},
                        original_of=lambda c: "" if c.threads is None else f"@{c.threads}t",
                        reopen=lambda c: _sleeping(seconds[c.name]), options=QUICK)
    # Another thread count is another race: tried; int8 dynamic at the same threads is not.
    assert judged == [INT8.name, at_one.name, FP32.name]
    outcome = next(o for o in result.outcomes if o.candidate is dynamic)
    assert outcome.outcome is Outcome.NOT_TRIED
    assert outcome.reason is not None and outcome.reason.startswith(
        "not tried: int8-static/all, the likeliest winner of its family")
    assert result.race is not None and set(result.race.originals_ms_p50) == {"", "@1t"}
