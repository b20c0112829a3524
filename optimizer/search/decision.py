"""Choose a search's winner and say why each other candidate lost.

The race (race.py) leaves the candidates no measurement can separate from the fastest; of
those the most faithful precision wins (fp32 before fp16/bf16 before int8/fp8, then the higher
cosine), because a speed-up inside the noise is not worth any accuracy. Every other candidate
gets the reason it lost: slower beyond its interval, over the latency budget, out of the
accuracy budget, refused, failed with its error, or not tried within the time budget.

Where the original can ship (`original_ships`), it is a contestant too, and the most faithful
of all: a candidate wins only when it is faster than the original beyond its interval (the most
faithful of the survivors that are, so a tie with the original never wins). When none is (the
fastest tied with or slower than the original, or no candidate got into the race at all), the
decision is the original, saying why. A search over several backends says which backend won
and by how much against the best candidate of each other one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from optimizer.measure.stats import FASTER, NO_DIFFERENCE, speedup_verdict
from optimizer.registries.backends import BACKENDS, Backend
from optimizer.registries.precisions import PRECISIONS
from optimizer.search.candidates import Candidate, Refusal
from optimizer.search.race import Standing
from optimizer.search.strategy import Strategy

__all__ = ["CandidateOutcome", "Outcome", "SearchDecision", "Strategy", "decide"]

class Outcome(StrEnum):
    WON = "won"
    SLOWER = "slower"  # left the race, or tied and less faithful
    OVER_LATENCY_BUDGET = "over_latency_budget"
    OUT_OF_ACCURACY_BUDGET = "out_of_accuracy_budget"
    REFUSED = "refused"
    FAILED = "failed"
    NOT_TRIED = "not_tried"  # the time budget ran out first
    TIMED = "timed"  # built, validated and in the race (before the decision)


@dataclass(frozen=True)
class CandidateOutcome:
    """What became of one candidate before the race: built and within the accuracy budget
    (`TIMED`), out of it, failed; with its accuracy metrics, engine size and build time."""

    candidate: Candidate
    outcome: Outcome
    reason: str | None = None
    accuracy: Mapping[str, float] = field(default_factory=dict)  # the worst output's metrics
    engine_bytes: int | None = None
    build_s: float | None = None


@dataclass(frozen=True)
class SearchDecision:
    winner: str | None
    why: str  # why it won, or why nothing did (or why the original ships)
    rows: list[dict[str, Any]]  # the Pareto table: every candidate, the refused ones too
    # Why the user's original ships instead of any candidate; None: a candidate won, or
    # nothing did and the original cannot ship (the search then fails).
    original: str | None = None
    # Of a search over several backends: each one's fastest raced candidate, the winner's first
    # ({"backend", "label", "best", "precision", "speedup"}); empty for one backend.
    backends: list[dict[str, Any]] = field(default_factory=list)


def decide(outcomes: Sequence[CandidateOutcome], standings: Mapping[str, Standing],
           refused: Sequence[Refusal] = (), *, original_ships: bool = False) -> SearchDecision:
    """The winner among the raced candidates still in at the end, and a row per candidate;
    with `original_ships`, the original competes (see the module's docstring)."""
    by_name = {o.candidate.name: o for o in outcomes}
    order = {o.candidate.name: at for at, o in enumerate(outcomes)}
    survivors = [name for name, s in standings.items() if s.out is None]
    survivors.sort(key=lambda name: _tie_key(by_name[name], order[name]))
    winner = survivors[0] if survivors else None
    original = None
    if original_ships:
        # Only a candidate faster than the original can win; the most faithful of those.
        beat = [name for name in survivors if _beats_original(standings[name])]
        original = _original_wins(winner, outcomes, standings) if not beat else None
        winner = beat[0] if beat else None
    rows = []
    for outcome in outcomes:
        name = outcome.candidate.name
        standing = standings.get(name)
        verdict, reason = _verdict(outcome, standing, winner, standings, original_ships)
        rows.append(_row(outcome, standing, verdict, reason))
    rows.extend({"name": r.name, "outcome": Outcome.REFUSED.value, "reason": r.reason}
                for r in refused)
    _mark_pareto(rows)
    backends = _backend_bests(outcomes, standings, winner or next(iter(survivors), None))
    if original is not None:
        why = original
    elif winner is None:
        why = "no candidate was built within the accuracy and latency budgets"
    else:
        why = _why_won(winner, standings, survivors)
        if backends:
            why = f"{_backend_verdict(backends)}; {why}"
    return SearchDecision(winner, why, rows, original, backends)


def _beats_original(standing: Standing) -> bool:
    return speedup_verdict(*standing.speedup_ci) == FASTER


def _original_wins(best: str | None, outcomes: Sequence[CandidateOutcome],
                   standings: Mapping[str, Standing]) -> str | None:
    """Why the original ships rather than any candidate, none of the survivors (`best` the
    most faithful of them) being faster than it; None where every raced candidate was over
    the latency budget (the original's p99 is no answer)."""
    if best is not None:
        s = standings[best]
        return (f"no candidate beat the original: the fastest, {best}, ran at {s.speedup:.3f}x "
                f"the original's speed (95% interval {s.speedup_ci[0]:.3f}-"
                f"{s.speedup_ci[1]:.3f}), {speedup_verdict(*s.speedup_ci)} over "
                f"{s.rounds} rounds; the original is the model itself, so it ships unchanged")
    if standings:
        slower = [name for name, s in standings.items()
                  if s.out is not None and s.out.startswith("slower than the original")]
        if not slower:
            return None
        return (f"no candidate beat the original: every candidate raced was slower than it or "
                f"out ({len(slower)} slower than the original beyond its interval); the "
                "original ships unchanged")
    lost = [o for o in outcomes if o.outcome is not Outcome.NOT_TRIED]
    counts = ", ".join(f"{sum(o.outcome is kind for o in lost)} {kind.value.replace('_', ' ')}"
                       for kind in (Outcome.OUT_OF_ACCURACY_BUDGET, Outcome.FAILED,
                                    Outcome.SLOWER)
                       if any(o.outcome is kind for o in lost))
    return ("no candidate reached the race to beat the original"
            + (f" ({counts})" if counts else "") + "; the original ships unchanged")


def _backend_bests(outcomes: Sequence[CandidateOutcome], standings: Mapping[str, Standing],
                   first: str | None) -> list[dict[str, Any]]:
    """Each backend's fastest raced candidate (by speed-up), `first`'s backend first and
    `first` standing for it; none where one backend raced (its candidates name none)."""
    best: dict[Backend | None, CandidateOutcome] = {}
    for outcome in outcomes:
        standing = standings.get(outcome.candidate.name)
        if standing is None:
            continue
        key = outcome.candidate.backend
        held = best.get(key)
        if outcome.candidate.name == first or held is None or (
                held.candidate.name != first
                and standing.speedup > standings[held.candidate.name].speedup):
            best[key] = outcome
    if len(best) < 2:
        return []
    by_first = sorted(best.items(), key=lambda item: item[1].candidate.name != first)
    return [{"backend": None if key is None else str(key),
             "label": str(key) if key is None else BACKENDS[key].label,
             "best": o.candidate.name, "precision": str(o.candidate.precision),
             "speedup": round(standings[o.candidate.name].speedup, 4)} for key, o in by_first]


def _backend_verdict(backends: Sequence[Mapping[str, Any]]) -> str:
    """ "OpenVINO bf16 won: 0.41x the original's time, 1.9x faster than the best ONNX Runtime
    candidate (onnxruntime:int8-static/all)". """
    won, others = backends[0], backends[1:]
    against = ", ".join(
        f"{won['speedup'] / other['speedup']:.2g}x faster than the best {other['label']} "
        f"candidate ({other['best']})" for other in others)
    return (f"{won['label']} {won['precision']} won: {1 / won['speedup']:.2g}x the original's "
            f"time, {against}")


def _tie_key(outcome: CandidateOutcome, planned_at: int) -> tuple[int, float, int]:
    """The most faithful precision (`PrecisionSpec.fidelity`), then the higher cosine (to 4
    places: below that it is rounding noise), then the earlier in the plan (the default pass
    set before its variants, so a tie keeps what a plain job would have built)."""
    rank = -PRECISIONS[outcome.candidate.precision].fidelity
    cosine = round(float(outcome.accuracy.get("cosine", 1.0)), 4)
    return rank, -cosine, planned_at


def _verdict(outcome: CandidateOutcome, standing: Standing | None, winner: str | None,
             standings: Mapping[str, Standing], original_ships: bool
             ) -> tuple[Outcome, str | None]:
    name = outcome.candidate.name
    if standing is None:
        return outcome.outcome, outcome.reason
    if name == winner:
        return Outcome.WON, None
    if standing.out is not None:
        over = standing.out.startswith("over the latency budget")
        return (Outcome.OVER_LATENCY_BUDGET if over else Outcome.SLOWER), standing.out
    if original_ships and not _beats_original(standing):
        return Outcome.SLOWER, (
            f"no measurable speed-up over the original ({standing.speedup:.3f}x, 95% interval "
            f"{standing.speedup_ci[0]:.3f}-{standing.speedup_ci[1]:.3f}); the original, the "
            "model itself, is the more faithful"
            + (f", and {winner} beat it" if winner is not None else ""))
    assert winner is not None  # a survivor that did not win means there is a winner
    return Outcome.SLOWER, (
        f"no measurable difference from {winner} (speed-up {standing.speedup:.3f}x, 95% "
        f"interval {standing.speedup_ci[0]:.3f}-{standing.speedup_ci[1]:.3f}, against "
        f"{standings[winner].speedup:.3f}x); {winner} is the more faithful")


def _row(outcome: CandidateOutcome, standing: Standing | None, verdict: Outcome,
         reason: str | None) -> dict[str, Any]:
    row: dict[str, Any] = {
        "name": outcome.candidate.name, "outcome": verdict.value, "reason": reason,
        "recipe": outcome.candidate.overrides(), "precision": str(outcome.candidate.precision),
        "accuracy": dict(outcome.accuracy), "engine_bytes": outcome.engine_bytes,
        "build_s": None if outcome.build_s is None else round(outcome.build_s, 3)}
    if standing is not None:
        row.update(standing.to_dict())
    return row


def _mark_pareto(rows: list[dict[str, Any]]) -> None:
    """`pareto`: no other timed row is at least as fast and as accurate, and better in one."""
    timed = [r for r in rows if "latency_ms_p50" in r]
    for row in rows:
        row["pareto"] = row in timed and not any(
            _dominates(other, row) for other in timed if other is not row)


def _dominates(a: dict[str, Any], b: dict[str, Any]) -> bool:
    a_cos, b_cos = a["accuracy"].get("cosine", 1.0), b["accuracy"].get("cosine", 1.0)
    no_worse = a["latency_ms_p50"] <= b["latency_ms_p50"] and a_cos >= b_cos
    return bool(no_worse and (a["latency_ms_p50"] < b["latency_ms_p50"] or a_cos > b_cos))


def _why_won(winner: str, standings: Mapping[str, Standing], survivors: list[str]) -> str:
    s = standings[winner]
    figures = (f"{s.latency_ms_p50:.3g} ms p50, {s.speedup:.3f}x the original (95% interval "
               f"{s.speedup_ci[0]:.3f}-{s.speedup_ci[1]:.3f})")
    if s.requests > 1:
        figures += (f", serving {s.requests} requests at once: {s.throughput_per_s:.4g} "
                    "inferences a second")
    if speedup_verdict(*s.speedup_ci) == NO_DIFFERENCE:
        figures += "; no measurable speed-up over the original"
    if len(survivors) == 1:
        return f"fastest: every other candidate was slower beyond its interval or out; {figures}"
    tied = ", ".join(name for name in survivors if name != winner)
    return (f"tied within the intervals with {tied}, and the most faithful of them (then the "
            f"earliest in the plan); {figures}")
