"""Time a search's candidates side by side and drop each as soon as it is surely slower.

A race, not a tournament of separate benchmarks: every round times the original and each
candidate still in the race, in one process, in an order that reverses every other round, so
drifting machine load hits them alike. After `min_rounds`, each candidate is compared with the
leader (the lowest median time) by its per-round time ratio to it: when the 95% bootstrap
interval of that ratio lies wholly above 1.01, the candidate is out ("slower beyond its
interval"; closer than 1% is a tie).
The race stops early once one candidate is left, since no other can win then; otherwise at
`max_rounds` or at the deadline (never before `min_rounds`), with the survivors statistically
tied.

A call of a run may serve several requests at once (`requests`: a throughput search runs one
request per core at a candidate's thread count); candidates are then compared by time per
request, while their latency figures stay those of a call, what each request waited.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np

from optimizer.measure.stats import TIE_MARGIN, bootstrap_median_ci

__all__ = ["RaceOptions", "RaceResult", "Standing", "race"]

_RESAMPLES = 1000
# A ratio interval must clear 1 by TIE_MARGIN (1%) to drop a candidate: a smaller difference
# is a tie (the more faithful candidate then wins), however surely measured.
_MIN_ROUND_S, _MAX_CALLS = 0.02, 200  # a round lasts long enough that a scheduler tick can't decide it
STOPPED_ONE_LEFT, STOPPED_ROUNDS, STOPPED_DEADLINE = "one left", "rounds done", "time budget"


@dataclass(frozen=True)
class RaceOptions:
    min_rounds: int = 5  # before anyone is dropped: fewer give intervals too wide to trust
    max_rounds: int = 30
    calls: int = 3  # fewest calls per variant per round (more for a fast model)
    batch_size: int = 1
    deadline: float | None = None  # time.monotonic() to stop at, whatever is left
    latency_budget_ms: float | None = None  # a p99 over it drops the candidate
    seed: int = 0


@dataclass(frozen=True)
class Standing:
    """One candidate's figures when the race ended (or when it left it)."""

    name: str
    rounds: int
    latency_ms_p50: float
    latency_ms_p50_ci: tuple[float, float]
    latency_ms_p99: float
    throughput_per_s: float
    speedup: float  # the original's time per request over this one's, median of per-round ratios
    speedup_ci: tuple[float, float]
    out: str | None = None  # why it left the race; None: it was still in at the end
    requests: int = 1  # served at once by each call (concurrent streams)

    def to_dict(self) -> dict[str, object]:
        return {"rounds": self.rounds, "requests": self.requests,
                "latency_ms_p50": round(self.latency_ms_p50, 4),
                "latency_ms_p50_ci": [round(v, 4) for v in self.latency_ms_p50_ci],
                "latency_ms_p99": round(self.latency_ms_p99, 4),
                "throughput_per_s": round(self.throughput_per_s, 3),
                "speedup": round(self.speedup, 4),
                "speedup_ci": [round(v, 4) for v in self.speedup_ci], "out": self.out}


@dataclass
class RaceResult:
    standings: dict[str, Standing]
    rounds: int
    stopped: str  # STOPPED_ONE_LEFT, STOPPED_ROUNDS or STOPPED_DEADLINE
    reference_ms_p50: float = math.nan

    @property
    def survivors(self) -> list[str]:
        return [name for name, s in self.standings.items() if s.out is None]


@dataclass
class _Timings:
    requests: int = 1  # served by each call
    rounds: list[float] = field(default_factory=list)  # the median call of each round, s
    calls: list[float] = field(default_factory=list)  # every call, s (for the p99)

    def per_request(self) -> np.ndarray:
        """Each round's median call, per request it served: what candidates are compared by."""
        return np.asarray(self.rounds) / self.requests


def race(runs: Mapping[str, Callable[[], object]], reference: Callable[[], object],
         options: RaceOptions = RaceOptions(),
         on_round: Callable[[int, list[str]], None] | None = None,
         requests: Mapping[str, int] | None = None) -> RaceResult:
    """Race `runs` (one call each runs its engine on the search's batch, `requests[name]`
    times at once; 1 where not given) against `reference` (the original, one request a call).
    `on_round(round, still_in)` after each round: the caller's progress and cancel check.

    Raises:
        ValueError: no candidate to race, or a request count below 1.
    """
    if not runs:
        raise ValueError("race: no candidate to time")
    served = {name: (requests or {}).get(name, 1) for name in runs}
    if min(served.values()) < 1:
        raise ValueError(f"race: request counts must be 1 or more, got {served}")
    every = {"": reference, **runs}  # "" is the original: never a candidate name
    for run in every.values():
        run()  # warm-up: allocations and first-call costs
    calls = _calls_per_round(reference, options.calls)
    timings = {name: _Timings(requests=served.get(name, 1)) for name in every}
    out: dict[str, str] = {}
    final: dict[str, Standing] = {}
    rng = np.random.default_rng(options.seed)
    stopped, done = STOPPED_ROUNDS, 0
    for round_index in range(options.max_rounds):
        live = [name for name in every if name not in out]
        for name in live if round_index % 2 == 0 else live[::-1]:
            _time_round(every[name], calls, timings[name])
        done = round_index + 1
        if done >= options.min_rounds:
            for name, why in _dropped(timings, out, options, rng).items():
                out[name] = why
                final[name] = _standing(name, timings, options, rng, why)
        still_in = [name for name in runs if name not in out]
        if on_round is not None:
            on_round(done, still_in)
        if len(still_in) <= 1 and done >= options.min_rounds:
            stopped = STOPPED_ONE_LEFT
            break
        if options.deadline is not None and time.monotonic() >= options.deadline \
                and done >= options.min_rounds:  # fewer rounds could not separate anyone
            stopped = STOPPED_DEADLINE
            break
    for name in runs:
        if name not in final:
            final[name] = _standing(name, timings, options, rng, None)
    return RaceResult({name: final[name] for name in runs}, done, stopped,
                      float(np.median(timings[""].rounds)) * 1e3)


def _calls_per_round(reference: Callable[[], object], fewest: int) -> int:
    started = time.perf_counter()
    reference()
    first_s = time.perf_counter() - started
    return min(_MAX_CALLS, max(fewest, math.ceil(_MIN_ROUND_S / max(first_s, 1e-6))))


def _time_round(run: Callable[[], object], calls: int, into: _Timings) -> None:
    times = []
    for _ in range(calls):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    into.rounds.append(float(np.median(times)))
    into.calls.extend(times)


def _dropped(timings: Mapping[str, _Timings], out: Mapping[str, str], options: RaceOptions,
             rng: np.random.Generator) -> dict[str, str]:
    """The candidates to drop after this round, and why: over the latency budget, or slower
    than the leader beyond the interval of their per-round ratio to it."""
    live = [name for name in timings if name and name not in out]
    dropped: dict[str, str] = {}
    if options.latency_budget_ms is not None:
        for name in live:
            p99 = float(np.percentile(timings[name].calls, 99)) * 1e3
            if p99 > options.latency_budget_ms:
                dropped[name] = (f"over the latency budget: p99 {p99:.3g} ms > "
                                 f"{options.latency_budget_ms:g} ms")
    live = [name for name in live if name not in dropped]
    if len(live) < 2:
        return dropped
    leader = min(live, key=lambda name: float(np.median(timings[name].per_request())))
    lead = timings[leader].per_request()
    for name in live:
        if name == leader:
            continue
        # Rounds since both were in: the leader was in every round this one was.
        mine = timings[name].per_request()
        ratios = mine / lead[:mine.size]
        low, high = bootstrap_median_ci(ratios, rng, resamples=_RESAMPLES)
        if low > 1.0 + TIE_MARGIN:
            dropped[name] = (f"slower than {leader} beyond its interval: "
                             f"{float(np.median(ratios)):.3f}x its time "
                             f"(95% interval {low:.3f}-{high:.3f})")
    return dropped


def _standing(name: str, timings: Mapping[str, _Timings], options: RaceOptions,
              rng: np.random.Generator, out: str | None) -> Standing:
    mine = timings[name]
    calls = np.asarray(mine.rounds)
    original = timings[""].per_request()[:calls.size]
    speedups = original / mine.per_request()
    p50 = float(np.median(calls))
    return Standing(
        name=name, rounds=int(calls.size), latency_ms_p50=p50 * 1e3,
        latency_ms_p50_ci=tuple(v * 1e3 for v in bootstrap_median_ci(  # type: ignore[arg-type]
            calls, rng, resamples=_RESAMPLES)),
        latency_ms_p99=float(np.percentile(mine.calls, 99)) * 1e3,
        throughput_per_s=options.batch_size * mine.requests / p50,
        speedup=float(np.median(speedups)),
        speedup_ci=bootstrap_median_ci(speedups, rng, resamples=_RESAMPLES), out=out,
        requests=mine.requests)
