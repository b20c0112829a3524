"""A job's plan before any worker time is spent (`POST /v1/jobs?dry_run=true`): the config as
it would be stored, the fusion rules that fire or refuse on the model (with the reasons), the
candidates a search would try and those it refuses, each node class's precision per candidate,
and an estimate of the time from the project's finished jobs. Nothing is written.

The plan runs the passes on the model at the job's shapes, in the API process: what the
worker's first fusion would do, at a fraction of a job's cost (no engine, no validation).
"""

import statistics
import uuid
from dataclasses import dataclass
from typing import Any

import onnx
from sqlalchemy import select
from sqlalchemy.orm import Session

from api.schemas.jobs import JobCreate
from api.services.errors import InvalidJobConfig
from api.services.jobs.commands import resolved_job_config, waiting_detail
from core.db.models import Job, JobStatus, Model, SearchCandidate
from core.job_config import JobConfig, quantization_of
from core.settings import WebhookSettings
from core.storage import ArtifactStore
from optimizer.errors import InputShapeError, PassError
from optimizer.registries.precisions import PRECISIONS
from optimizer.search.candidates import Candidate
from optimizer.search.plan import job_plan, search_plan
from optimizer.static_model import static_model

__all__ = ["plan_job"]

_HISTORY = 20  # the most recent finished jobs an estimate reads


def plan_job(*, session: Session, project_id: uuid.UUID, spec: JobCreate, store: ArtifactStore,
             webhooks: WebhookSettings) -> dict[str, Any]:
    """The plan of the job `spec` asks for (JSON-ready); the same refusals as `create_job`.

    Raises:
        ModelNotFound, DatasetNotFound, InvalidJobConfig: as `create_job`; InvalidJobConfig
            also when a pass cannot run on the model.
    """
    model, config = resolved_job_config(session=session, project_id=project_id, spec=spec,
                                        webhooks=webhooks)
    with store.open(model.storage_uri) as file:
        graph = onnx.load(file)
    try:
        fixed = static_model(graph, config.input_shapes).model
        plan = _plan(fixed, config)
    except (InputShapeError, PassError) as err:
        raise InvalidJobConfig(str(err)) from err
    return {"dry_run": True, "model_id": str(model.id), "config": config.model_dump(mode="json"),
            "plan": plan, "estimate": _estimate(session, project_id, model, config, plan),
            "waiting": waiting_detail(session, config)}


def _plan(model: onnx.ModelProto, config: JobConfig) -> dict[str, Any]:
    if config.search is None:
        precision = PRECISIONS[config.precision]
        mode = quantization_of(config).mode if precision.quantizes else None
        passes = config.passes if isinstance(config.passes, str) else tuple(config.passes)
        job = Candidate("the job", config.precision, passes, mode, config.ort_optimization_level,
                        config.cpu_threads)
        return job_plan(model, job, str(config.backend))
    return search_plan(model, config.search_spaces(
        has_calibration=quantization_of(config).calibration is not None))


def _estimate(session: Session, project_id: uuid.UUID, model: Model, config: JobConfig,
              plan: dict[str, Any]) -> dict[str, Any]:
    """Seconds the job should take, from the project's history: a one-configuration job at the
    median of this model's last succeeded jobs (else of the backend's, scaled by model size);
    a search at its candidates times the median candidate's build and judgement (recorded in
    `search_candidates`, scaled alike), plus its winner's run as a job, never past its time
    budget. `seconds` is None without history to go by."""
    jobs = _recent(session, project_id, config, model)
    search = config.search
    if search is None:
        return {"seconds": _rounded(jobs.seconds), "upper_bound_s": None, "basis": jobs.basis}
    candidates = _recent_candidates(session, project_id, config, model)
    count = len(plan["candidates"])
    if candidates.seconds is None:
        return {"seconds": None, "upper_bound_s": _rounded(search.time_budget_s + (
            jobs.seconds or 0.0)), "basis": (
            "no finished search to go by: the search's time budget bounds it, plus the "
            "winner's run")}
    # The winner's run as a job's; without one to go by, as a candidate's (it is built and
    # validated alike, then benchmarked and profiled too: this errs short).
    winner = jobs if jobs.seconds is not None else candidates
    assert winner.seconds is not None
    race = _recent_races(session, project_id, config, model)
    racing = count * (race.seconds or 0.0)
    seconds = min(count * candidates.seconds + racing, search.time_budget_s) + winner.seconds
    raced = (f"the race at {race.basis}" if race.seconds is not None
             else "the race not counted (no finished search's race to go by)")
    return {"seconds": _rounded(seconds),
            "upper_bound_s": _rounded(search.time_budget_s + winner.seconds), "basis": (
        f"{count} candidates at {candidates.basis}, {raced}, then the winner's run at "
        f"{winner.basis}")}


@dataclass(frozen=True)
class _Typical:
    seconds: float | None
    basis: str


def _recent(session: Session, project_id: uuid.UUID, config: JobConfig, model: Model
            ) -> _Typical:
    """A one-configuration job's typical run: this model's, else the backend's per byte of
    model (search jobs left out: their runs are searches)."""
    rows = session.execute(
        select(Job.model_id, Job.config, Job.started_at, Job.finished_at, Model.size_bytes)
        .join(Model, Model.id == Job.model_id)
        .where(Job.project_id == project_id, Job.status == JobStatus.SUCCEEDED.value)
        .order_by(Job.finished_at.desc()).limit(_HISTORY * 5)).all()
    runs = [(model_id, (finished - started).total_seconds(), size)
            for model_id, stored, started, finished, size in rows
            if started is not None and finished is not None and stored.get("search") is None
            and stored.get("backend") == str(config.backend)][:_HISTORY]
    return _typical(runs, model, "succeeded jobs")


def _recent_candidates(session: Session, project_id: uuid.UUID, config: JobConfig,
                       model: Model) -> _Typical:
    rows = session.execute(
        select(Job.model_id, Job.config, SearchCandidate.build_s, Model.size_bytes)
        .join(Job, Job.id == SearchCandidate.job_id).join(Model, Model.id == Job.model_id)
        .where(Job.project_id == project_id, SearchCandidate.build_s.is_not(None))
        .order_by(SearchCandidate.id.desc()).limit(_HISTORY * 5)).all()
    runs = [(model_id, build_s, size) for model_id, stored, build_s, size in rows
            if build_s is not None and stored.get("backend") == str(config.backend)]
    return _typical(runs, model, "search candidates")


def _recent_races(session: Session, project_id: uuid.UUID, config: JobConfig,
                  model: Model) -> _Typical:
    """A race's seconds per variant timed in it: a finished search's time less its
    candidates' builds, over its raced candidates and the original."""
    rows = session.execute(
        select(Job.model_id, Job.config, Job.search_report, Model.size_bytes)
        .join(Model, Model.id == Job.model_id)
        .where(Job.project_id == project_id, Job.search_report.is_not(None))
        .order_by(Job.finished_at.desc()).limit(_HISTORY * 5)).all()
    runs = []
    for model_id, stored, report, size in rows:
        raced = [row for row in report.get("rows") or () if "latency_ms_p50" in row]
        if not raced or stored.get("backend") != str(config.backend) \
                or report.get("elapsed_s") is None:
            continue
        building = sum(row.get("build_s") or 0.0 for row in report["rows"])
        runs.append((model_id, max(0.0, report["elapsed_s"] - building) / (len(raced) + 1),
                     size))
    return _typical(runs[:_HISTORY], model, "searches' races per variant raced")


def _typical(runs: list[tuple[uuid.UUID, float, int]], model: Model, what: str) -> _Typical:
    """The median of `runs` (model, seconds, its model's bytes) of `model`, else of them all
    per byte of model, scaled to this one."""
    own = [seconds for model_id, seconds, _ in runs if model_id == model.id]
    backend = [(seconds, size) for _, seconds, size in runs]
    if own:
        return _Typical(statistics.median(own),
                        f"the median of this model's last {len(own)} {what}")
    if backend:
        per_byte = statistics.median(s / max(size, 1) for s, size in backend)
        return _Typical(per_byte * model.size_bytes,
                        f"the median of the backend's last {len(backend)} {what} in this "
                        "project per byte of model, times this model's size")
    return _Typical(None, f"no {what} of this model or backend to go by")


def _rounded(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds, 1)
