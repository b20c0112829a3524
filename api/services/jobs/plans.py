"""A job's plan before any worker time is spent (`POST /v1/jobs?dry_run=true`): the config as
it would be stored, the fusion rules that fire or refuse on the model (with the reasons), the
candidates a search would try and those it refuses, each node class's precision per candidate,
and an estimate of the time from the project's finished jobs. Nothing is written.

The plan runs the passes on the model at the job's shapes, in the API process: what the
worker's first fusion would do, at a fraction of a job's cost (no engine, no validation).
"""

import statistics
import uuid
from typing import Any

import onnx
from sqlalchemy import select
from sqlalchemy.orm import Session

from api.schemas.jobs import JobCreate
from api.services.errors import InvalidJobConfig
from api.services.jobs.commands import resolved_job_config, waiting_detail
from core.db.models import Job, JobStatus
from core.job_config import JobConfig, quantization_of
from core.settings import WebhookSettings
from core.storage import ArtifactStore
from optimizer.errors import InputShapeError, PassError
from optimizer.registries.precisions import PRECISIONS
from optimizer.search.candidates import Candidate, SearchSpace
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
            "plan": plan, "estimate": _estimate(session, project_id, model.id, config, plan),
            "waiting": waiting_detail(session, config)}


def _plan(model: onnx.ModelProto, config: JobConfig) -> dict[str, Any]:
    search = config.search
    if search is None:
        precision = PRECISIONS[config.precision]
        mode = quantization_of(config).mode if precision.quantizes else None
        passes = config.passes if isinstance(config.passes, str) else tuple(config.passes)
        job = Candidate("the job", config.precision, passes, mode, config.ort_optimization_level)
        return job_plan(model, job, str(config.backend))
    space = SearchSpace(
        backend=config.backend,
        precisions=tuple(search.precisions) if search.precisions else None,
        pass_sets=search.pass_sets,
        ort_levels=tuple(search.ort_levels) if search.ort_levels else None,
        has_calibration=quantization_of(config).calibration is not None,
        target_gpu=config.target_gpu)
    return search_plan(model, space)


def _estimate(session: Session, project_id: uuid.UUID, model_id: uuid.UUID, config: JobConfig,
              plan: dict[str, Any]) -> dict[str, Any]:
    """Seconds the job should take: the median run of the project's last finished jobs of
    this model (else of this backend), once per candidate and once more for a search's
    winner; a search never runs past its time budget."""
    runs, basis = _recent_runs(session, project_id, Job.model_id == model_id), "this model"
    if not runs:
        runs = _recent_runs(session, project_id, Job.config["backend"].as_string()
                            == str(config.backend))
        basis = f"backend {config.backend} in this project"
    per_job = statistics.median(runs) if runs else None
    search = config.search
    candidates = len(plan["candidates"])
    if search is None:
        seconds = per_job
        why = (f"the median of the last {len(runs)} succeeded jobs of {basis}" if runs
               else "no succeeded job of this model or backend to go by")
        return {"seconds": _rounded(seconds), "upper_bound_s": None, "basis": why}
    bound = search.time_budget_s + (per_job or 0.0)
    seconds = None if per_job is None else min(per_job * candidates, search.time_budget_s) \
        + per_job
    why = (f"{candidates} candidates and the winner's build, each at most the median of the "
           f"last {len(runs)} succeeded jobs of {basis} (a candidate is not benchmarked or "
           "profiled, so this errs long); the search stops at its time budget"
           if runs else "no succeeded job of this model or backend to go by: the search's "
           "time budget bounds it, plus the winner's build")
    return {"seconds": _rounded(seconds), "upper_bound_s": _rounded(bound) if runs else
            search.time_budget_s, "basis": why}


def _recent_runs(session: Session, project_id: uuid.UUID, which: Any) -> list[float]:
    rows = session.execute(
        select(Job.started_at, Job.finished_at).where(
            Job.project_id == project_id, Job.status == JobStatus.SUCCEEDED.value, which,
            Job.started_at.is_not(None), Job.finished_at.is_not(None))
        .order_by(Job.finished_at.desc()).limit(_HISTORY)).all()
    return [(finished - started).total_seconds() for started, finished in rows
            if started is not None and finished is not None]


def _rounded(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds, 1)
