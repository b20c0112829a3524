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

The original may run several ways (`reference` a mapping: at each thread count a search
tries), each candidate's speed-up taken against its own (`original_of`), so a 1-thread
candidate is judged against the original at 1 thread. With `original_competes` the original is
in the race too: a candidate surely slower than its original is out, and the race does not stop
at one candidate left while that one is still tied with its original (it may yet be the
original that ships).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np

from optimizer.measure.stats import TIE_MARGIN, bootstrap_median_ci

__all__ = ["STOPPED_DEADLINE", "STOPPED_NONE_LEFT", "STOPPED_ONE_LEFT", "STOPPED_ROUNDS",
           "RaceOptions", "RaceResult", "Standing", "race"]

_RESAMPLES = 1000
# A ratio interval must clear 1 by TIE_MARGIN (1%) to drop a candidate: a smaller difference
# is a tie (the more faithful candidate then wins), however surely measured.
_MIN_ROUND_S, _MAX_CALLS = 0.02, 200  # a round lasts long enough that a scheduler tick can't decide it
STOPPED_ONE_LEFT, STOPPED_ROUNDS, STOPPED_DEADLINE = "one left", "rounds done", "time budget"
STOPPED_NONE_LEFT = "none left"  # every candidate out: slower than the original, or over budget
_ORIGINAL = "\0original:"  # prefixes the original's runs: never a candidate's name


@dataclass(frozen=True)
class RaceOptions:
    min_rounds: int = 5  # before anyone is dropped: fewer give intervals too wide to trust
    max_rounds: int = 30
    calls: int = 3  # fewest calls per variant per round (more for a fast model)
    batch_size: int = 1
    deadline: float | None = None  # time.monotonic() to stop at, whatever is left
    latency_budget_ms: float | None = None  # a p99 over it drops the candidate
    seed: int = 0
    # The original is a contestant: a candidate surely slower than it is out (it can ship).
    original_competes: bool = False


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
    stopped: str  # STOPPED_ONE_LEFT, STOPPED_NONE_LEFT, STOPPED_ROUNDS or STOPPED_DEADLINE
    reference_ms_p50: float = math.nan
    # The original's median time per way it ran (the keys of `reference`; "" when one)
    originals_ms_p50: dict[str, float] = field(default_factory=dict)

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


def race(runs: Mapping[str, Callable[[], object]],
         reference: Callable[[], object] | Mapping[str, Callable[[], object]],
         options: RaceOptions = RaceOptions(),
         on_round: Callable[[int, list[str]], None] | None = None,
         requests: Mapping[str, int] | None = None,
         original_of: Mapping[str, str] | None = None,
         original_requests: Mapping[str, int] | None = None) -> RaceResult:
    """Race `runs` (one call each runs its engine on the search's batch, `requests[name]`
    times at once; 1 where not given) against `reference` (the original, one call a request,
    or a mapping of the ways it runs), each candidate against `reference[original_of[name]]`
    (the first where not given), which serves `original_requests[key]` requests a call (1
    where not given). `on_round(round, still_in)` after each round: the caller's progress and
    cancel check.

    Raises:
        ValueError: no candidate to race, a request count below 1, or a candidate's original
            not among `reference`'s.
    """
    if not runs:
        raise ValueError("race: no candidate to time")
    served = {name: (requests or {}).get(name, 1) for name in runs}
    if min(served.values()) < 1:
        raise ValueError(f"race: request counts must be 1 or more, got {served}")
    originals = dict(reference) if isinstance(reference, Mapping) else {"": reference}
    first = next(iter(originals))
    theirs = {name: _ORIGINAL + (original_of or {}).get(name, first) for name in runs}
    unknown = sorted({key for key in theirs.values()} - {_ORIGINAL + k for k in originals})
    if unknown:
        raise ValueError(f"race: no original {[k[len(_ORIGINAL):] for k in unknown]} among "
                         f"{sorted(originals)}")
    every = {**{_ORIGINAL + key: run for key, run in originals.items()}, **runs}
    for run in every.values():
        run()  # warm-up: allocations and first-call costs
    calls = _calls_per_round(originals[first], options.calls)
    served |= {_ORIGINAL + key: count for key, count in (original_requests or {}).items()}
    timings = {name: _Timings(requests=served.get(name, 1)) for name in every}
    out: dict[str, str] = {}
    final: dict[str, Standing] = {}
    rng = np.random.default_rng(options.seed)
    stopped, done = STOPPED_ROUNDS, 0
    for round_index in range(options.max_rounds):
        needed = {theirs[name] for name in runs if name not in out}
        live = [name for name in every if name not in out
                and (not name.startswith(_ORIGINAL) or name in needed)]
        for name in live if round_index % 2 == 0 else live[::-1]:
            _time_round(every[name], calls, timings[name])
        done = round_index + 1
        if done >= options.min_rounds:
            for name, why in _dropped(timings, out, theirs, options, rng).items():
                out[name] = why
                final[name] = _standing(name, timings, theirs[name], options, rng, why)
        still_in = [name for name in runs if name not in out]
        if on_round is not None:
            on_round(done, still_in)
        if done >= options.min_rounds and not still_in:
            stopped = STOPPED_NONE_LEFT
            break
        if len(still_in) <= 1 and done >= options.min_rounds and not (
                options.original_competes
                and _tied_with_original(still_in[0], timings, theirs, rng)):
            stopped = STOPPED_ONE_LEFT
            break
        if options.deadline is not None and time.monotonic() >= options.deadline \
                and done >= options.min_rounds:  # fewer rounds could not separate anyone
            stopped = STOPPED_DEADLINE
            break
    for name in runs:
        if name not in final:
            final[name] = _standing(name, timings, theirs[name], options, rng, None)
    originals_ms = {key: float(np.median(timings[_ORIGINAL + key].rounds)) * 1e3
                    for key in originals if timings[_ORIGINAL + key].rounds}
    return RaceResult({name: final[name] for name in runs}, done, stopped,
                      originals_ms.get(first, math.nan), originals_ms)


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


def _dropped(timings: Mapping[str, _Timings], out: Mapping[str, str],
             theirs: Mapping[str, str], options: RaceOptions,
             rng: np.random.Generator) -> dict[str, str]:
    """The candidates to drop after this round, and why: over the latency budget, slower
    than the leader beyond the interval of their per-round ratio to it, or (the original
    competing) slower than their original so."""
    live = [name for name in timings if not name.startswith(_ORIGINAL) and name not in out]
    dropped: dict[str, str] = {}
    if options.latency_budget_ms is not None:
        for name in live:
            p99 = float(np.percentile(timings[name].calls, 99)) * 1e3
            if p99 > options.latency_budget_ms:
                dropped[name] = (f"over the latency budget: p99 {p99:.3g} ms > "
                                 f"{options.latency_budget_ms:g} ms")
    live = [name for name in live if name not in dropped]
    if options.original_competes:
        for name in live:
            low, high, median = _ratio_interval(timings[name], timings[theirs[name]], rng)
            if low > 1.0 + TIE_MARGIN:
                dropped[name] = (f"slower than the original beyond its interval: "
                                 f"{median:.3f}x its time (95% interval {low:.3f}-{high:.3f})")
        live = [name for name in live if name not in dropped]
    if len(live) < 2:
        return dropped
    leader = min(live, key=lambda name: float(np.median(timings[name].per_request())))
    for name in live:
        if name == leader:
            continue
        # Rounds since both were in: the leader was in every round this one was.
        low, high, median = _ratio_interval(timings[name], timings[leader], rng)
        if low > 1.0 + TIE_MARGIN:
            dropped[name] = (f"slower than {leader} beyond its interval: "
                             f"{median:.3f}x its time (95% interval {low:.3f}-{high:.3f})")
    return dropped


def _ratio_interval(mine: _Timings, other: _Timings, rng: np.random.Generator
                    ) -> tuple[float, float, float]:
    """The 95% interval and median of `mine`'s per-round time per request over `other`'s, in
    the rounds both ran (`other` ran in every round `mine` did)."""
    own = mine.per_request()
    ratios = own / other.per_request()[:own.size]
    low, high = bootstrap_median_ci(ratios, rng, resamples=_RESAMPLES)
    return low, high, float(np.median(ratios))


def _tied_with_original(name: str, timings: Mapping[str, _Timings], theirs: Mapping[str, str],
                        rng: np.random.Generator) -> bool:
    """Whether `name` is neither surely faster nor surely slower than its original yet."""
    low, high, _ = _ratio_interval(timings[name], timings[theirs[name]], rng)
    return high >= 1.0 - TIE_MARGIN and low <= 1.0 + TIE_MARGIN


def _standing(name: str, timings: Mapping[str, _Timings], original_key: str,
              options: RaceOptions, rng: np.random.Generator, out: str | None) -> Standing:
    mine = timings[name]
    calls = np.asarray(mine.rounds)
    original = timings[original_key].per_request()[:calls.size]
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
