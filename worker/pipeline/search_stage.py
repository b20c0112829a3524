"""Stage `search` of a search job: build and judge every candidate, race those within the
accuracy budget, and hand the winner's config to the rest of the pipeline.

Each candidate is a one-configuration job (`JobConfig.candidate_config`) run through the same
optimize → build → validate as any job (engine_attempts.py), in a scratch folder of its own,
so a candidate's engine is exactly the engine its recipe would build. Each is recorded in the
`search_candidates` table as it starts ("building") and as it is judged: a search whose process
died resumes with what was recorded, and a candidate whose build killed the process is failed
with that reason instead of being built again. The race runs under the backend's timing lock,
against the job's original at ONNX Runtime's default level (or TensorRT's reference engine),
at each thread count the candidates run at (search_originals.py): a candidate is judged
against the original at its own. Where the job's backend can ship the original, the original
competes: when no candidate beats it, the search's decision is the original, and the pipeline
ships it (run.py).

A CPU job's search that names no `search.backends` tries every CPU backend this worker runs
(`JobConfig.searched_backends` with the worker's capabilities), each precision each builds.
"""

from __future__ import annotations

import re
import shutil
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from core.db.models import JobStatus
from core.job_config import JobConfig, SearchConfig
from core.reports import SearchReport
from optimizer.capabilities import HostCapabilities
from optimizer.errors import AccuracyMismatchError, OptimizerError
from optimizer.measure.environment import host_cores
from optimizer.registries.backends import BACKENDS
from optimizer.registries.precisions import PRECISIONS
from optimizer.search.candidates import Candidate, CandidatePlan, plan_search
from optimizer.search.decision import CandidateOutcome, Outcome, Strategy
from optimizer.search.driver import Evaluated, Opener, SearchOptions, run_search
from optimizer.search.model_space import spaces_for_model
from optimizer.search.race import RaceOptions
from optimizer.search.streams import concurrent_calls, requests_per_host
from optimizer.validation import ValidationReport
from worker.pipeline.backends.base import JobBackend
from worker.pipeline.engine_attempts import validated_engine
from worker.pipeline.progress import StageProgress
from worker.pipeline.records.recorder import JobRecorder
from worker.pipeline.results import BuiltEngine, JobOutcome, JobRun, LoadedModel
from worker.pipeline.search_originals import original_key, original_label, search_originals
from worker.pipeline.stages import BENCHMARK, OPTIMIZE, SEARCH, ProgressSpan, span_of
from worker.pipeline.steps.benchmark import benchmark_setup

__all__ = ["SearchStageResult", "search_configurations"]

BackendFor = Callable[[JobRun, StageProgress], JobBackend[Any]]
# The search stage's progress: building and judging the candidates fills this share of it, one
# equal part each (their steps within it as in a job's own optimize → validate); the race of
# those timed, and the reference it times them against, the rest.
_BUILDS_SHARE = 0.85
BUILDING = "building"  # a candidate's row while it is built
_DIED_BUILDING = ("the job's process died while this candidate was built (a crash in native "
                  "code or the out-of-memory killer); the resumed search went on without it")


@dataclass(frozen=True)
class SearchStageResult:
    report: SearchReport
    winner: JobConfig | None  # the one-configuration job that rebuilds the winner
    original: str | None = None  # why the original ships instead (no candidate beat it)


class _BudgetSpent(Exception):
    """The search's building time ran out while a candidate was still being built."""


class _CandidateProgress(StageProgress):
    """A candidate's stages, recorded as events of stage `search`, each moving the job's
    progress through the candidate's `share` of the search as the stage would through a job
    (each step still restarts the stage clock the supervisor holds to limits). Past
    `deadline` (monotonic seconds) its next step raises _BudgetSpent: an int8 accuracy search
    takes many steps, and one begun near the budget's end would overrun it by minutes."""

    def __init__(self, job: StageProgress, candidate: str, share: ProgressSpan,
                 deadline: float | None = None) -> None:
        self._job, self._candidate, self._share = job, candidate, share
        self._deadline = deadline

    def enter(self, stage: str, note: str | None = None) -> ProgressSpan:
        detail = f"candidate {self._candidate}: {stage}" + (f" ({note})" if note else "")
        self._within_budget(detail)
        return self._job.enter_part(SEARCH, self._share.part(*_step_share(stage)), detail)

    def note(self, message: str) -> None:
        self._within_budget(message)
        self._job.note(f"candidate {self._candidate}: {message}")

    def _within_budget(self, step: str) -> None:
        if self._deadline is not None and time.monotonic() > self._deadline:
            raise _BudgetSpent(step.removeprefix(f"candidate {self._candidate}: "))

    def waiting(self, waiting: bool) -> None:
        self._job.waiting(waiting)


def search_configurations(run: JobRun, loaded: LoadedModel, backend_for: BackendFor,
                          recorder: JobRecorder, progress: StageProgress,
                          capabilities: HostCapabilities | None = None) -> SearchStageResult:
    """Search the configurations of `run` (a job with `search`) on a worker of
    `capabilities` (None: its own backend only, unless `search.backends` says) and decide.

    Raises:
        JobStopped: the job was cancelled meanwhile.
        PassError: a pass cannot run on the model at all.
    """
    search = run.config.search
    assert search is not None, "only a search job has a search stage"
    span = progress.enter(SEARCH, f"search of up to {search.time_budget_s:g} s")
    plan = _plan(run, loaded, capabilities)
    recorded = _recorded(recorder, plan)
    backends = run.config.searched_backends(capabilities)
    progress.note(f"{len(plan.candidates)} candidates, {len(plan.refused)} refused"
                  + (f", on backends {', '.join(map(str, backends))}" if len(backends) > 1
                     else "")
                  + (f"; {len(recorded)} recorded before, resuming" if recorded else ""))
    reference_backend = backend_for(run, progress)
    _, feed = benchmark_setup(run, loaded)
    judged = len(recorded)

    builds = span.part(0.0, _BUILDS_SHARE)

    options = SearchOptions(time_budget_s=search.time_budget_s, race=RaceOptions(
        batch_size=loaded.batch_size, latency_budget_ms=search.latency_budget_ms,
        seed=run.config.validation.seed,
        original_competes=reference_backend.original_backend is not None))

    def build(candidate: Candidate, deadline: float | None = None
              ) -> tuple[JobBackend[Any], BuiltEngine[Any], ValidationReport | None, float]:
        candidate_run = _candidate_run(run, candidate)
        count = max(len(plan.candidates), 1)
        at = min(judged, count - 1)  # a rebuild for the race: its last part
        its_progress = _CandidateProgress(progress, candidate.name,
                                          builds.part(at / count, (at + 1) / count), deadline)
        backend = backend_for(candidate_run, its_progress)
        outcome = JobOutcome()
        started = time.monotonic()
        optimized, engine = validated_engine(candidate_run, backend, loaded, outcome,
                                             its_progress)
        if optimized.engine_precision is not None:  # int8 judged not worth shipping
            raise _QuantizedNotShipped.fp32_ships(outcome.reports.accuracy().quantization or {})
        quantized = engine.quantization or {}
        if quantized.get("shipped") not in (None, str(candidate.precision)):  # TensorRT's fp16
            raise _QuantizedNotShipped(Outcome.SLOWER, (
                f"TensorRT's {quantized['shipped']} engine would ship: "
                f"{quantized.get('why', 'it was faster')}"))
        return backend, engine, outcome.validation, time.monotonic() - started

    def evaluate(candidate: Candidate) -> Evaluated:
        recorder.record_search_candidate(candidate.name, outcome=BUILDING,
                                         recipe=candidate.overrides())
        try:  # JobStopped (a cancel) is no OptimizerError: it goes through
            # The first candidate always gets its chance: a search has something to race.
            deadline = (None if judged == 0 else
                        search_started + options.time_budget_s * options.build_share)
            backend, engine, validation, build_s = build(candidate, deadline)
        except _BudgetSpent as err:
            return Evaluated(CandidateOutcome(candidate, Outcome.NOT_TRIED, reason=(
                f"not finished: the search's time budget ({options.time_budget_s:g} s) ran out "
                f"while it was built (at step: {err}); a larger time_budget_s tries it")))
        except _QuantizedNotShipped as err:
            return Evaluated(CandidateOutcome(candidate, err.outcome, reason=err.reason))
        except AccuracyMismatchError as err:
            return Evaluated(CandidateOutcome(candidate, Outcome.OUT_OF_ACCURACY_BUDGET,
                                              reason=str(err)))
        except OptimizerError as err:
            return Evaluated(CandidateOutcome(candidate, Outcome.FAILED,
                                              reason=f"{type(err).__name__}: {err}"))
        outcome = CandidateOutcome(candidate, Outcome.TIMED, accuracy=_worst(validation),
                                   engine_bytes=_engine_bytes(engine), build_s=build_s)
        return Evaluated(outcome, _opener(backend, engine, feed, requests(candidate)))

    def requests(candidate: Candidate) -> int:
        return _requests(run.config, candidate)

    def reopen(candidate: Candidate) -> Opener:
        @contextmanager
        def rebuilt() -> Iterator[Callable[[], object]]:
            backend, engine, _, _ = build(candidate)
            with _opener(backend, engine, feed, requests(candidate))() as call:
                yield call
        return rebuilt

    def finished(outcome: CandidateOutcome) -> None:
        nonlocal judged
        judged += 1
        recorder.record_search_candidate(outcome.candidate.name, **_columns(outcome))
        if outcome.outcome is not Outcome.TIMED:
            shutil.rmtree(_candidate_dir(run, outcome.candidate), ignore_errors=True)
        progress.report(
            [f"candidate {outcome.candidate.name}: {outcome.outcome}"
             + (f" ({outcome.reason})" if outcome.reason else "")],
            builds.part(0.0, judged / max(len(plan.candidates), 1)).end)

    originals = search_originals(
        run, plan, loaded, feed, span.part(_BUILDS_SHARE, 1.0), job_backend=reference_backend,
        backend_for=lambda at: backend_for(at, progress), requests=requests)
    search_started = time.monotonic()
    result = run_search(
        plan, evaluate=evaluate, reopen=reopen, recorded=recorded, on_finished=finished,
        reference=originals.openers, original_of=original_key,
        original_requests=originals.requests,
        stopped=lambda: recorder.status() is not JobStatus.RUNNING, requests=requests,
        options=options)
    decision = result.decision
    winner = next((c for c in plan.candidates if c.name == decision.winner), None)
    winner_config = None if winner is None else run.config.candidate_config(winner.overrides())
    race = None if result.race is None else {
        "rounds": result.race.rounds, "stopped": result.race.stopped,
        "originals_ms_p50": {original_label(key): round(ms, 4)
                             for key, ms in result.race.originals_ms_p50.items()}}
    report = SearchReport(
        strategy=str(search.strategy), winner=decision.winner, why=decision.why,
        original=decision.original, backends=decision.backends or None,
        recipe=None if winner_config is None else _recipe(winner_config),
        rows=_ordered(decision.rows, search), race=race, resumed=list(result.resumed),
        time_budget_s=search.time_budget_s, elapsed_s=round(time.monotonic() - search_started, 3))
    shipped = decision.winner or ("the original" if decision.original else "no winner")
    progress.note(f"search: {shipped}: {decision.why}")
    shutil.rmtree(run.scratch_dir / _SEARCH_DIR, ignore_errors=True)
    return SearchStageResult(report, winner_config, decision.original)


def _step_share(stage: str) -> tuple[float, float]:
    """The share of a candidate's part that `stage` fills: its span between `optimize` and
    `benchmark` in the job's table (stages.STAGES); the whole part for any other."""
    first, last = span_of(OPTIMIZE).start, span_of(BENCHMARK).start
    step = span_of(stage)
    if not first <= step.start < last:
        return 0.0, 1.0
    return (step.start - first) / (last - first), (min(step.end, last) - first) / (last - first)


class _QuantizedNotShipped(Exception):
    """A quantized candidate whose own step ships another engine: the fp32 model (out of
    budget or not faster on ONNX Runtime), or TensorRT's fp16 engine (faster than int8)."""

    def __init__(self, outcome: Outcome, reason: str) -> None:
        super().__init__(reason)
        self.outcome, self.reason = outcome, reason

    @classmethod
    def fp32_ships(cls, quantization: Mapping[str, Any]) -> _QuantizedNotShipped:
        """Slower where a form was within budget, or every form timed was no faster than fp32
        (the int8 search stopped early on speed); else out of the accuracy budget."""
        tried = quantization.get("tried") or ()
        within_budget = any(form.get("passed") for form in tried)
        ratios = [form["speed"]["ratio"] for form in tried if form.get("speed")]
        not_faster = bool(ratios) and min(ratios) >= 1.0
        return cls(Outcome.SLOWER if within_budget or not_faster
                   else Outcome.OUT_OF_ACCURACY_BUDGET,
                   f"the fp32 model would ship: {quantization.get('why', 'int8 did not')}")


_SEARCH_DIR = "search"


def _plan(run: JobRun, loaded: LoadedModel,
          capabilities: HostCapabilities | None) -> CandidatePlan:
    spaces = run.config.search_spaces(has_calibration=loaded.calibration is not None,
                                      capabilities=capabilities)
    narrowed = spaces_for_model(onnx.load(loaded.fusion_source), spaces)
    return plan_search([space for space, _ in narrowed])


def _recorded(recorder: JobRecorder, plan: CandidatePlan) -> dict[str, CandidateOutcome]:
    """What an earlier run of this search recorded; a candidate left "building" killed that
    run's process, and is failed now so it is not built again."""
    by_name = {c.name: c for c in plan.candidates}
    recorded = {}
    for row in recorder.search_candidates():
        candidate = by_name.get(row["name"])
        if candidate is None:
            continue
        if row["outcome"] == BUILDING:
            outcome = CandidateOutcome(candidate, Outcome.FAILED, reason=_DIED_BUILDING)
            recorder.record_search_candidate(candidate.name, **_columns(outcome))
        else:
            outcome = CandidateOutcome(
                candidate, Outcome(row["outcome"]), reason=row["reason"],
                accuracy=row["accuracy"], engine_bytes=row["engine_bytes"],
                build_s=row["build_s"])
        recorded[candidate.name] = outcome
    return recorded


def _candidate_dir(run: JobRun, candidate: Candidate) -> Path:
    return run.scratch_dir / _SEARCH_DIR / re.sub(r"[^A-Za-z0-9_.-]+", "_", candidate.name)


def _candidate_run(run: JobRun, candidate: Candidate) -> JobRun:
    folder = _candidate_dir(run, candidate)
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    return replace(run, config=run.config.candidate_config(candidate.overrides()),
                   scratch_dir=folder)


def _requests(config: JobConfig, candidate: Candidate) -> int:
    """The requests a candidate serves at once in the race: one, but in a throughput search
    as many as the host's cores hold at its threads, on a backend whose engines run on CPU
    threads (streams.py)."""
    search = config.search
    backend = candidate.backend or config.backend
    if search is None or search.strategy is not Strategy.MAX_THROUGHPUT \
            or "intra_op_threads" not in BACKENDS[backend].options:
        return 1
    return requests_per_host(host_cores(), candidate.threads or config.cpu_threads)


def _opener(backend: JobBackend[Any], engine: BuiltEngine[Any], feed: dict[str, np.ndarray],
            requests: int) -> Opener:
    @contextmanager
    def opened() -> Iterator[Callable[[], object]]:
        with backend.open_runner(engine) as runner, \
                concurrent_calls(lambda: runner.infer(feed), requests) as call:
            yield call
    return opened


def _worst(validation: ValidationReport | None) -> dict[str, float]:
    """The worst output's metrics: the lowest cosine and top-1 agreement, the largest error."""
    if validation is None or not validation.outputs:
        return {}
    outputs = validation.outputs
    worst = {"cosine": min(o.cosine_similarity for o in outputs),
             "max_abs_err": max(o.max_abs_err for o in outputs)}
    top1 = [o.top1_agreement for o in outputs if o.top1_agreement is not None]
    if top1:
        worst["top1_agreement"] = min(top1)
    return {name: float(value) for name, value in worst.items()}


def _engine_bytes(engine: BuiltEngine[Any]) -> int | None:
    files = [a.path for a in engine.artifacts if a.kind == "engine" and a.path.exists()]
    if not files:
        return None
    data = [p.with_name(p.name + ".data") for p in files]  # an external-data engine's weights
    return sum(p.stat().st_size for p in [*files, *data] if p.exists())


def _columns(outcome: CandidateOutcome) -> dict[str, Any]:
    return {"outcome": str(outcome.outcome), "reason": outcome.reason,
            "recipe": outcome.candidate.overrides(), "accuracy": dict(outcome.accuracy),
            "engine_bytes": outcome.engine_bytes, "build_s": outcome.build_s}


def _recipe(config: JobConfig) -> dict[str, Any]:
    """The winner's job config as a user would pin it: the fields that differ from a default
    job's, so the recipe reads as what was chosen."""
    fields = config.model_dump(mode="json", exclude_defaults=True)
    fields.update({"backend": str(config.backend), "precision": str(config.precision),
                   "passes": config.passes})
    if PRECISIONS[config.precision].quantizes and config.quantization is not None:
        fields["quantization"] = config.quantization.model_dump(mode="json", exclude_defaults=True)
        fields["quantization"]["mode"] = str(config.quantization.mode)
    return fields


def _ordered(rows: list[dict[str, Any]], search: SearchConfig) -> list[dict[str, Any]]:
    """The Pareto table in the strategy's order: raced rows by p50 (throughput: most first),
    then the rest as the search met them."""
    timed = [r for r in rows if "latency_ms_p50" in r]
    rest = [r for r in rows if "latency_ms_p50" not in r]
    if search.strategy is Strategy.MAX_THROUGHPUT:
        timed.sort(key=lambda r: -float(r["throughput_per_s"]))
    else:
        timed.sort(key=lambda r: float(r["latency_ms_p50"]))
    return [*timed, *rest]
