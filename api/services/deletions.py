"""Delete a project's model, job or dataset with what is recorded about it: the rows in one
transaction, the files only after it commits. A model's or dataset's stored calibrations
(core/db/calibrations.py) go with it, rows and files.

A file that fails to go is left to the janitor (worker/janitor.py), which removes a job's stored
files once no row records them and stored uploads no row names; so a failure leaves a file
behind, never a row pointing at a missing file. Another project's id is "not found", as for
every route. A queued or running job is never deleted, nor the model or dataset it uses.
"""

import logging
import uuid
from collections.abc import Sequence

from sqlalchemy import ColumnElement, Select, delete, select, update
from sqlalchemy.orm import Session

from api.services.errors import (
    DatasetInUse,
    DatasetNotFound,
    JobNotDeletable,
    JobNotFound,
    ModelInUse,
    ModelNotFound,
)
from core.db.models import (
    Artifact,
    BenchmarkRecord,
    Calibration,
    Dataset,
    Job,
    JobEvent,
    JobStatus,
    Model,
    ValidationResult,
    WebhookDelivery,
)
from core.storage import ArtifactStore

__all__ = ["delete_dataset", "delete_job", "delete_model"]

logger = logging.getLogger(__name__)

_ACTIVE = (JobStatus.QUEUED.value, JobStatus.RUNNING.value)
_SHOWN_IDS = 10  # a 409 names this many of the jobs in the way
_JOB_RECORDS = (WebhookDelivery, JobEvent, ValidationResult, BenchmarkRecord, Artifact)


def delete_job(*, session: Session, store: ArtifactStore, project_id: uuid.UUID,
               job_id: uuid.UUID) -> None:
    """Delete a finished job of the project: its row, artifacts, validation and benchmark
    records, events and webhook deliveries, then its artifact files.

    Raises:
        JobNotFound: no such job in the project.
        JobNotDeletable: the job is queued or running; cancel it first.
    """
    job = session.scalars(select(Job).where(Job.id == job_id, Job.project_id == project_id)
                          .with_for_update()).one_or_none()
    if job is None:
        raise JobNotFound.for_job(job_id)
    if job.status in _ACTIVE:
        status = job.status
        session.rollback()
        raise JobNotDeletable(
            f"job {job_id} is {status}; cancel it first (POST /v1/jobs/{job_id}/cancel), "
            "then delete it once it has ended")
    _delete_jobs(session, select(Job.id).where(Job.id == job_id))
    session.commit()
    _remove_job_files(store, [job_id])


def delete_model(*, session: Session, store: ArtifactStore, project_id: uuid.UUID,
                 model_id: uuid.UUID) -> list[uuid.UUID]:
    """Delete a model of the project with its jobs (all finished) and everything they
    recorded, then their artifact files and the uploaded file (unless another project's model
    has the same bytes: stored files are shared by content). Returns the deleted jobs' ids.

    Raises:
        ModelNotFound: no such model in the project.
        ModelInUse: some of its jobs are queued or running (the message names them).
    """
    # Locked: a job being created for the model waits, and then finds no model (404).
    model = session.scalars(select(Model).where(Model.id == model_id,
                                                Model.project_id == project_id)
                            .with_for_update()).one_or_none()
    if model is None:
        raise ModelNotFound(f"model {model_id} does not exist; GET /v1/models lists the "
                            "uploaded ones")
    active = _active_jobs(session, Job.model_id == model_id)
    if active:
        session.rollback()
        raise ModelInUse(
            f"model {model_id} has {_jobs_named(active)}; cancel them (POST "
            "/v1/jobs/{id}/cancel) or let them end, then delete the model")
    of_model = select(Job.id).where(Job.model_id == model_id)
    job_ids = list(session.scalars(of_model))
    _delete_jobs(session, of_model)
    calibration_uris = _delete_calibrations(session, Calibration.model_id == model_id)
    session.execute(delete(Model).where(Model.id == model_id)
                    .execution_options(synchronize_session=False))
    session.commit()
    _remove_job_files(store, job_ids)
    _remove_calibration_files(store, calibration_uris)
    _remove_upload_file(session, store, Model, model.storage_uri)
    return job_ids


def delete_dataset(*, session: Session, store: ArtifactStore, project_id: uuid.UUID,
                   dataset_id: uuid.UUID) -> None:
    """Delete a dataset of the project and the calibrations computed on it, then its file
    (unless another project's dataset has the same bytes) and theirs. Finished jobs that
    validated on it keep their results: their reference to it is cleared (`config.dataset_id`
    still says which one they used).

    Raises:
        DatasetNotFound: no such dataset in the project.
        DatasetInUse: queued or running jobs validate or calibrate on it (`config.dataset_id`
            or `config.quantization.calibration`; the message names them).
    """
    dataset = session.scalars(select(Dataset).where(Dataset.id == dataset_id,
                                                    Dataset.project_id == project_id)
                              .with_for_update()).one_or_none()
    if dataset is None:
        raise DatasetNotFound(
            f"dataset {dataset_id} does not exist; GET /v1/datasets lists the uploaded ones")
    # A job names its calibration dataset in its stored config only (no column, no foreign key).
    calibrates = Job.config["quantization"]["calibration"].as_string() == str(dataset_id)
    active = _active_jobs(session, (Job.dataset_id == dataset_id) | calibrates)
    if active:
        session.rollback()
        raise DatasetInUse(
            f"dataset {dataset_id} is used by {_jobs_named(active)}; cancel them (POST "
            "/v1/jobs/{id}/cancel) or let them end, then delete the dataset")
    session.execute(update(Job).where(Job.dataset_id == dataset_id).values(dataset_id=None)
                    .execution_options(synchronize_session=False))
    calibration_uris = _delete_calibrations(session, Calibration.dataset_id == dataset_id)
    session.execute(delete(Dataset).where(Dataset.id == dataset_id)
                    .execution_options(synchronize_session=False))
    session.commit()
    _remove_calibration_files(store, calibration_uris)
    _remove_upload_file(session, store, Dataset, dataset.storage_uri)


def _active_jobs(session: Session, condition: ColumnElement[bool]) -> list[uuid.UUID]:
    return list(session.scalars(select(Job.id).where(condition, Job.status.in_(_ACTIVE))
                                .order_by(Job.created_at, Job.id)))


def _jobs_named(job_ids: Sequence[uuid.UUID]) -> str:
    shown = ", ".join(map(str, job_ids[:_SHOWN_IDS]))
    more = f" and {len(job_ids) - _SHOWN_IDS} more" if len(job_ids) > _SHOWN_IDS else ""
    return f"{len(job_ids)} queued or running job(s): {shown}{more}"


def _delete_jobs(session: Session, job_ids: Select[uuid.UUID]) -> None:
    """Delete the jobs `job_ids` selects and every row that records something of them."""
    ids = job_ids.scalar_subquery()
    for table in _JOB_RECORDS:
        session.execute(delete(table).where(table.job_id.in_(ids))
                        .execution_options(synchronize_session=False))
    session.execute(delete(Job).where(Job.id.in_(ids))
                    .execution_options(synchronize_session=False))


def _delete_calibrations(session: Session, condition: ColumnElement[bool]) -> list[str]:
    """Delete the calibration rows `condition` selects (explicitly: the cascade would too, but
    then their URIs would be unknown); their files' URIs."""
    uris = list(session.scalars(select(Calibration.storage_uri).where(condition)))
    session.execute(delete(Calibration).where(condition)
                    .execution_options(synchronize_session=False))
    return uris


def _remove_calibration_files(store: ArtifactStore, uris: Sequence[str]) -> None:
    for uri in uris:
        try:
            store.delete(uri)
        except OSError as err:
            logger.warning("could not remove calibration file %s of a deleted model or "
                           "dataset (%s)", uri, err)


def _remove_job_files(store: ArtifactStore, job_ids: Sequence[uuid.UUID]) -> None:
    for job_id in job_ids:
        try:
            store.delete_prefix(f"jobs/{job_id}/")
        except OSError as err:  # the janitor removes a job's files once no row records them
            logger.warning("could not remove the files of deleted job %s (%s); the janitor "
                           "will", job_id, err)


def _remove_upload_file(session: Session, store: ArtifactStore, kind: type[Model | Dataset],
                        uri: str) -> None:
    """Remove a deleted upload's file unless a row (of any project) still names it."""
    try:
        if session.scalars(select(kind.id).where(kind.storage_uri == uri).limit(1)).first():
            return
        store.delete(uri)
    except OSError as err:  # the janitor removes stored uploads no row names
        logger.warning("could not remove %s of a deleted %s (%s); the janitor will", uri,
                       kind.__tablename__[:-1], err)
    finally:
        session.rollback()  # ends the read (on SQLite it holds the write lock)
