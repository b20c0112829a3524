"""Jobs: create (commit, then dispatch), cancel (commit, then send its webhook), and find their
artifacts, each within the caller's project (another project's job is "not found").

The API's job documents (what GET and these routes answer) are read in `job_documents`."""

import logging
import uuid

from sqlalchemy import select
from sqlalchemy.orm import Session, selectinload

from api.schemas.jobs import JobCreate
from api.services.datasets import get_dataset
from api.services.errors import (
    ArtifactExpired,
    ArtifactNotFound,
    BrokerUnavailable,
    InvalidJobConfig,
    JobNotCancellable,
    JobNotFound,
)
from api.services.models import get_model
from core.callbacks.checks import callback_host_problem
from core.db import job_state
from core.db.models import Artifact, Dataset, Job, Model
from core.db.worker_registry import online_workers
from core.dispatch import JobDispatcher
from core.job_config import JobConfig
from core.projects import default_callback_url
from core.queues import is_gpu_queue, job_queue
from core.settings import WebhookSettings
from core.webhooks.announce import announce_end
from optimizer.backends.tensorrt.profiles import profiles_to_dict
from optimizer.capabilities import normalize_compute_capability
from optimizer.errors import DatasetError, InputRangeError, InputShapeError
from optimizer.job_inputs import DatasetArrays, ResolvedInputs, resolve_job_inputs
from optimizer.model.tensor_specs import TensorSpec
from optimizer.registries.backends import BACKENDS

__all__ = ["cancel_job", "create_job", "get_artifact", "kept_artifacts", "resolved_job_config",
           "waiting_detail"]

logger = logging.getLogger(__name__)

def create_job(*, session: Session, project_id: uuid.UUID, spec: JobCreate,
               dispatcher: JobDispatcher, webhooks: WebhookSettings) -> Job:
    """Insert a queued job of the project, commit, and only then send its id to the broker.

    A GPU backend's job (TensorRT's) no online worker can take is still queued (a GPU worker may
    start later), with a `status_detail` that names the GPU it waits for and the GPU workers that
    are online.

    A body without a `callback_url` field gets the project's default webhook (if any) in its
    stored config; `"callback_url": null` sends none. The default's host was checked when it
    was set, and the worker checks it again on every attempt, so it is not resolved here.

    Raises:
        ModelNotFound, DatasetNotFound: the model or dataset named does not exist in the
            project.
        InvalidJobConfig: input_shapes, profiles, input_ranges or the dataset do not fit the
            model's inputs (see optimizer/job_inputs.py); callback_url's host does not
            resolve or is not a public address (core/callbacks/addresses.py). The rules
            between fields alone (target_gpu or profiles without backend tensorrt...) are
            JobConfig's own.
        BrokerUnavailable: the job was stored but could not be sent; it is marked failed.
    """
    model, config = resolved_job_config(session=session, project_id=project_id, spec=spec,
                                        webhooks=webhooks)
    detail = waiting_detail(session, config)
    job = Job(project_id=project_id, model_id=model.id, dataset_id=spec.dataset_id,
              config=config.model_dump(mode="json"), status_detail=detail)
    session.add(job)
    session.flush()
    job_state.record_event(session, job.id, "queued" if detail is None else f"queued; {detail}")
    session.commit()
    try:
        dispatcher.send_job(job.id, config)
    except Exception as err:
        logger.exception("could not send job %s to the broker", job.id)
        message = f"the job could not be sent to the broker ({type(err).__name__}: {err})"
        job_state.fail(session, job.id, "BrokerUnavailable", message)
        session.commit()
        raise BrokerUnavailable(f"{message}; job {job.id} was marked failed, try again") from err
    return job


def resolved_job_config(*, session: Session, project_id: uuid.UUID, spec: JobCreate,
                        webhooks: WebhookSettings) -> tuple[Model, JobConfig]:
    """The job's model (share-locked until the caller's transaction ends, as its dataset) and
    its config as it would be stored: input shapes and profiles resolved against the model,
    the project's default callback URL filled in. Raises as `create_job`."""
    # Locked until the job commits: a delete of the model or dataset waits, then sees the job.
    model = get_model(session=session, project_id=project_id, model_id=spec.model_id,
                      share_lock=True)
    dataset = (
        get_dataset(session=session, project_id=project_id, dataset_id=spec.dataset_id,
                    share_lock=True)
        if spec.dataset_id else None
    )
    resolved = _resolved_inputs(spec, model, dataset)
    _check_calibration(session, project_id, spec, model)
    if spec.callback_url is not None:
        _check_callback_host(spec.callback_url, webhooks)
    callback_url = (spec.callback_url if "callback_url" in spec.model_fields_set
                    else default_callback_url(session=session, project_id=project_id))
    config = JobConfig.model_validate({
        **spec.model_dump(exclude={"model_id"}),
        "callback_url": callback_url,
        "input_shapes": {name: list(shape) for name, shape in resolved.shapes.items()},
        "profiles": profiles_to_dict(resolved.profiles) or None,
    })
    return model, config


def _resolved_inputs(spec: JobCreate, model: Model, dataset: Dataset | None) -> ResolvedInputs:
    """The job's inputs as the optimizer resolves them; its refusals (each starting with the
    field at fault) are the API's 422s."""
    arrays = None if dataset is None else DatasetArrays(
        label=f"dataset {dataset.id} ({dataset.name!r})", samples=dataset.samples,
        arrays=tuple(TensorSpec.from_dict(array) for array in dataset.arrays))
    try:
        return resolve_job_inputs(
            [TensorSpec.from_dict(spec) for spec in model.inputs],
            input_shapes=spec.input_shapes, profiles=spec.profile_shapes(),
            input_ranges=spec.input_ranges, dataset=arrays)
    except (InputShapeError, InputRangeError, DatasetError) as err:
        raise InvalidJobConfig(str(err)) from err


def _check_calibration(session: Session, project_id: uuid.UUID, spec: JobCreate,
                       model: Model) -> None:
    """An int8 job's calibration dataset exists in the project (locked, as the job's dataset)
    and fits the model's inputs at the job's shapes; refusals name quantization.calibration."""
    calibration = spec.quantization.calibration if spec.quantization else None
    if calibration is None:
        return
    dataset = get_dataset(session=session, project_id=project_id, dataset_id=calibration,
                          share_lock=True)
    try:
        _resolved_inputs(spec, model, dataset)
    except InvalidJobConfig as err:
        raise InvalidJobConfig(
            f"quantization.calibration: {str(err).removeprefix('dataset_id: ')}") from err


def _check_callback_host(url: str, webhooks: WebhookSettings) -> None:
    """Refuse a callback URL the worker would refuse to call (checked again at delivery)."""
    problem = callback_host_problem(url, webhooks)
    if problem is not None:
        raise InvalidJobConfig(f"callback_url: {problem}")


def waiting_detail(session: Session, config: JobConfig) -> str | None:
    """Why a job of a backend that not every host runs (a GPU backend, OpenVINO) will wait in
    its queue: None when an online worker consumes it.

    Workers list their queues in the `workers` table with a heartbeat (core/db/worker_registry.py);
    only a worker whose host can run a GPU backend consumes that backend's queues
    (core/queues.py), so the words come from the backend's spec.
    """
    spec = BACKENDS[config.backend]
    if not spec.needs_gpu and spec.host_check is None:
        return None  # any CPU worker takes it
    queue = job_queue(config)
    online = online_workers(session)
    if any(queue in worker.queues for worker in online):
        return None
    if not spec.needs_gpu:  # a CPU backend with a queue of its own (OpenVINO's)
        return (f"waiting for a worker: no online worker can run {spec.label} jobs "
                f"({spec.host_needs}; queue {queue!r}). The job stays queued until one starts "
                f"(`fuseforge worker --queues {spec.queue_name}` on a host that has them).")
    target = config.target_gpu
    if target is None:
        needs = f" ({spec.host_needs})" if spec.host_needs else ""
        wanted = f"can build {spec.label} engines{needs}"
    elif normalize_compute_capability(target) is not None:
        wanted = f"has a GPU of compute capability {target} with {spec.label}"
    else:
        wanted = f"has a GPU {target!r} with {spec.label}"
    gpu_workers = [w for w in online if any(is_gpu_queue(name) for name in w.queues)]
    seen = (
        "; online GPU workers: "
        + ", ".join(
            f"{w.name} ({w.gpu_name}, compute capability {w.compute_capability or 'unknown'}"
            + (f", TensorRT {w.tensorrt_version})" if w.tensorrt_version else ")")
            for w in gpu_workers
        )
        if gpu_workers
        else "; no GPU worker is online"
    )
    where = "a GPU machine" if target is None else "a machine with that GPU"
    return (
        f"waiting for a worker: no online worker {wanted} (queue {queue!r}){seen}. The job stays "
        f"queued until one starts (`fuseforge worker --queues {spec.queue_name}` on {where})."
    )


def _job_with_artifacts(session: Session, project_id: uuid.UUID, job_id: uuid.UUID) -> Job:
    job = session.scalars(
        select(Job).where(Job.id == job_id, Job.project_id == project_id)
        .options(selectinload(Job.artifacts))
    ).one_or_none()
    if job is None:
        raise JobNotFound.for_job(job_id)
    return job


def kept_artifacts(*, session: Session, project_id: uuid.UUID, job_id: uuid.UUID
                   ) -> list[Artifact]:
    """The job's artifacts whose files are still kept (retention removes old ones), by name.

    Raises:
        JobNotFound: no such job in the project.
        ArtifactNotFound: it has none (it has not succeeded, or all expired).
    """
    job = _job_with_artifacts(session, project_id, job_id)
    kept = sorted((a for a in job.artifacts if a.expired_at is None), key=lambda a: a.name)
    if not kept:
        raise ArtifactNotFound(f"job {job_id} has no artifacts to download (the job is "
                               f"{job.status}{'; they expired' if job.artifacts else ''})")
    return kept


def cancel_job(*, session: Session, project_id: uuid.UUID, job_id: uuid.UUID,
               dispatcher: JobDispatcher) -> None:
    """Cancel a queued or running job of the project (the supervisor of a running one stops it
    within about a second), then send its webhook (the worker announces only the ends it
    records)."""
    job = session.scalars(
        select(Job).where(Job.id == job_id, Job.project_id == project_id)).one_or_none()
    if job is None:
        raise JobNotFound.for_job(job_id)
    cancelled = job_state.cancel(session, job_id)
    if cancelled is None:
        session.refresh(job)  # it ended between the two statements
        raise JobNotCancellable(f"job {job_id} is already {job.status}; only queued or running "
                                "jobs can be cancelled")
    session.commit()
    announce_end(session, dispatcher, job_id)


def get_artifact(*, session: Session, project_id: uuid.UUID, job_id: uuid.UUID,
                 name: str) -> Artifact:
    artifact = session.scalars(
        select(Artifact).join(Job, Artifact.job_id == Job.id)
        .where(Artifact.job_id == job_id, Artifact.name == name, Job.project_id == project_id)
    ).one_or_none()
    if artifact is not None and artifact.expired_at is not None:
        raise ArtifactExpired(
            f"artifact {name!r} of job {job_id} is gone: its file was removed on "
            f"{artifact.expired_at:%Y-%m-%d} under the retention policy "
            "(FUSEFORGE_RETENTION__ARTIFACTS_DAYS); the job's record stays. Run the job again "
            "to get it")
    if artifact is not None:
        return artifact
    job = _job_with_artifacts(session, project_id, job_id)  # 404 for an unknown job first
    names = ", ".join(a.name for a in job.artifacts) or f"none yet (the job is {job.status})"
    raise ArtifactNotFound(f"job {job_id} has no artifact {name!r}; it has: {names}")
