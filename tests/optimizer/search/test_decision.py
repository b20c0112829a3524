"""The winner: the fastest once the race separated them, the most faithful of a tie; every
other candidate says why it lost, and the Pareto front is marked. Where the original can ship,
it wins a tie with it (and when no candidate reached the race); a search of two backends says
which won and by how much."""

from dataclasses import replace
from types import MappingProxyType

import pytest

from optimizer.registries.backends import Backend
from optimizer.registries.precisions import PRECISIONS, Precision
from optimizer.registries.quantization import QuantizationMode
from optimizer.search.candidates import Candidate, Refusal
from optimizer.search.decision import CandidateOutcome, Outcome, decide
from optimizer.search.race import Standing
from tests.support.race_stand_in import STAND_IN_CPU, patch_stand_in

FP32 = Candidate("fp32/all", Precision.FP32, "all", ort_level="all")
INT8 = Candidate("int8-static/all", Precision.INT8, "all", QuantizationMode.STATIC, "all")
NONE = Candidate("fp32/none", Precision.FP32, "none", ort_level="all")


def _standing(name: str, p50: float, speedup: float, ci: tuple[float, float],
              out: str | None = None) -> Standing:
    return Standing(name, 10, p50, (p50 * 0.98, p50 * 1.02), p50 * 1.2, 1000 / p50, speedup,
                    ci, out)


def test_the_one_left_in_the_race_wins_and_the_dropped_say_why() -> None:
    outcomes = [CandidateOutcome(INT8, Outcome.TIMED, accuracy={"cosine": 0.995}),
                CandidateOutcome(FP32, Outcome.TIMED, accuracy={"cosine": 1.0})]
    standings = {"int8-static/all": _standing("int8-static/all", 3.0, 3.1, (3.0, 3.2)),
                 "fp32/all": _standing("fp32/all", 9.0, 1.02, (0.99, 1.05),
                                       out="slower than int8-static/all beyond its interval")}
    decision = decide(outcomes, standings, [Refusal("fp16", "no kernels")])
    assert decision.winner == "int8-static/all"
    assert decision.why.startswith("fastest")
    rows = {row["name"]: row for row in decision.rows}
    assert rows["fp32/all"]["outcome"] == Outcome.SLOWER
    assert "beyond its interval" in rows["fp32/all"]["reason"]
    assert rows["fp16"] == {"name": "fp16", "outcome": "refused", "reason": "no kernels",
                            "pareto": False}
    # fp32 is slower but more accurate: both are on the front.
    assert rows["int8-static/all"]["pareto"] and rows["fp32/all"]["pareto"]
    assert rows["int8-static/all"]["recipe"]["quantization"] == {"mode": "static"}


def test_a_tie_goes_to_the_more_faithful_precision() -> None:
    outcomes = [CandidateOutcome(INT8, Outcome.TIMED, accuracy={"cosine": 0.995}),
                CandidateOutcome(FP32, Outcome.TIMED, accuracy={"cosine": 1.0})]
    standings = {"int8-static/all": _standing("int8-static/all", 8.8, 1.04, (0.98, 1.1)),
                 "fp32/all": _standing("fp32/all", 9.0, 1.02, (0.99, 1.05))}
    decision = decide(outcomes, standings)
    assert decision.winner == "fp32/all"
    assert "tied within the intervals" in decision.why
    int8 = next(row for row in decision.rows if row["name"] == "int8-static/all")
    assert int8["outcome"] == Outcome.SLOWER and "no measurable difference" in int8["reason"]


def test_candidates_out_of_the_accuracy_budget_or_failed_keep_their_reason() -> None:
    outcomes = [CandidateOutcome(INT8, Outcome.OUT_OF_ACCURACY_BUDGET,
                                 reason="cosine 0.93 < 0.99", accuracy={"cosine": 0.93}),
                CandidateOutcome(NONE, Outcome.FAILED, reason="EngineBuildError: boom"),
                CandidateOutcome(FP32, Outcome.TIMED, accuracy={"cosine": 1.0})]
    decision = decide(outcomes, {"fp32/all": _standing("fp32/all", 9.0, 1.0, (0.98, 1.02))})
    assert decision.winner == "fp32/all"
    rows = {row["name"]: row for row in decision.rows}
    assert rows["int8-static/all"]["outcome"] == "out_of_accuracy_budget"
    assert rows["int8-static/all"]["reason"] == "cosine 0.93 < 0.99"
    assert rows["fp32/none"]["outcome"] == "failed" and not rows["fp32/none"]["pareto"]


def test_nothing_timed_means_no_winner_and_says_so() -> None:
    decision = decide([CandidateOutcome(INT8, Outcome.FAILED, reason="x")], {})
    assert decision.winner is None and "no candidate" in decision.why


def test_a_tie_goes_to_the_precision_whose_spec_says_it_is_more_faithful(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # A registry where int8 outranks fp32 in fidelity: the same tie now goes to int8.
    monkeypatch.setattr("optimizer.search.decision.PRECISIONS", MappingProxyType({
        **PRECISIONS, Precision.INT8: replace(PRECISIONS[Precision.INT8], fidelity=200)}))
    outcomes = [CandidateOutcome(FP32, Outcome.TIMED, accuracy={"cosine": 1.0}),
                CandidateOutcome(INT8, Outcome.TIMED, accuracy={"cosine": 0.995})]
    standings = {"int8-static/all": _standing("int8-static/all", 8.8, 1.04, (0.98, 1.1)),
                 "fp32/all": _standing("fp32/all", 9.0, 1.02, (0.99, 1.05))}
    assert decide(outcomes, standings).winner == "int8-static/all"


def test_where_the_original_can_ship_a_tie_with_it_ships_the_original_saying_why() -> None:
    outcomes = [CandidateOutcome(FP32, Outcome.TIMED, accuracy={"cosine": 1.0})]
    standings = {"fp32/all": _standing("fp32/all", 9.0, 1.004, (0.99, 1.02))}
    assert decide(outcomes, standings).winner == "fp32/all"  # where it cannot ship

    decision = decide(outcomes, standings, original_ships=True)
    assert decision.winner is None and decision.original == decision.why
    assert decision.why.startswith("no candidate beat the original: the fastest, fp32/all, "
                                   "ran at 1.004x the original's speed")
    row = decision.rows[0]
    assert row["outcome"] == Outcome.SLOWER
    assert row["reason"].startswith("no measurable speed-up over the original (1.004x")


def test_a_candidate_faster_than_the_original_beyond_its_interval_still_wins() -> None:
    outcomes = [CandidateOutcome(INT8, Outcome.TIMED, accuracy={"cosine": 0.995})]
    standings = {"int8-static/all": _standing("int8-static/all", 3.0, 3.1, (3.0, 3.2))}
    decision = decide(outcomes, standings, original_ships=True)
    assert decision.winner == "int8-static/all" and decision.original is None


def test_the_original_ships_when_no_candidate_reached_the_race_or_all_were_slower() -> None:
    decision = decide([CandidateOutcome(INT8, Outcome.OUT_OF_ACCURACY_BUDGET, reason="cosine"),
                       CandidateOutcome(NONE, Outcome.FAILED, reason="EngineBuildError: x")],
                      {}, original_ships=True)
    assert decision.winner is None
    assert decision.original == ("no candidate reached the race to beat the original (1 out "
                                 "of accuracy budget, 1 failed); the original ships unchanged")
    slower = _standing("fp32/all", 9.0, 0.5, (0.48, 0.52),
                       out="slower than the original beyond its interval: 2.000x its time")
    decision = decide([CandidateOutcome(FP32, Outcome.TIMED)], {"fp32/all": slower},
                      original_ships=True)
    assert decision.original is not None and "slower than it" in decision.original
    # Every candidate over the latency budget: the original's p99 is no answer, nothing ships.
    over = replace(slower, out="over the latency budget: p99 12 ms > 5 ms")
    decision = decide([CandidateOutcome(FP32, Outcome.TIMED)], {"fp32/all": over},
                      original_ships=True)
    assert decision.winner is None and decision.original is None


def test_a_search_of_two_backends_says_which_won_and_by_how_much(
        monkeypatch: pytest.MonkeyPatch) -> None:
    patch_stand_in(monkeypatch)
    ort = replace(INT8, name="onnxruntime:int8-static/all", backend=Backend.ONNXRUNTIME)
    ort_fp32 = replace(FP32, name="onnxruntime:fp32/all", backend=Backend.ONNXRUNTIME)
    other = replace(FP32, name="stand-in-cpu:fp32/all", backend=STAND_IN_CPU)
    outcomes = [CandidateOutcome(c, Outcome.TIMED, accuracy={"cosine": 0.999})
                for c in (ort, ort_fp32, other)]
    standings = {
        other.name: _standing(other.name, 2.0, 2.5, (2.4, 2.6)),
        ort.name: _standing(ort.name, 4.0, 1.25, (1.2, 1.3), out="slower than stand-in-cpu"),
        ort_fp32.name: _standing(ort_fp32.name, 5.0, 1.0, (0.98, 1.02), out="slower")}
    decision = decide(outcomes, standings, original_ships=True)
    assert decision.winner == other.name
    assert decision.why.startswith(
        "Stand-in CPU fp32 won: 0.4x the original's time, 2x faster than the best ONNX "
        "Runtime candidate (onnxruntime:int8-static/all); fastest")
    assert [b["backend"] for b in decision.backends] == ["stand-in-cpu", "onnxruntime"]
    assert decision.backends[1]["best"] == ort.name
    # One backend: no comparison to make.
    assert decide(outcomes[:2], {k: standings[k] for k in (ort.name, ort_fp32.name)}
                  ).backends == []


def test_a_less_faithful_candidate_that_beat_the_original_wins_over_one_tied_with_it() -> None:
    outcomes = [CandidateOutcome(FP32, Outcome.TIMED, accuracy={"cosine": 1.0}),
                CandidateOutcome(INT8, Outcome.TIMED, accuracy={"cosine": 0.995})]
    standings = {"fp32/all": _standing("fp32/all", 9.0, 1.01, (0.98, 1.04)),
                 "int8-static/all": _standing("int8-static/all", 8.6, 1.04, (1.02, 1.06))}
    assert decide(outcomes, standings).winner == "fp32/all"  # the original cannot ship
    decision = decide(outcomes, standings, original_ships=True)
    assert decision.winner == "int8-static/all" and decision.original is None
    fp32 = next(row for row in decision.rows if row["name"] == "fp32/all")
    assert fp32["outcome"] == Outcome.SLOWER
    assert fp32["reason"].endswith("and int8-static/all beat it")
