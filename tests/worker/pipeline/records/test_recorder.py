"""`JobRecorder.fail_internally`: a fault of ours is recorded with one sentence, wherever the
worker catches it (the pipeline in the job's process, or the supervisor around it); the job's
outcome is recorded as it ends."""

from __future__ import annotations

import uuid

from sqlalchemy.orm import Session, sessionmaker

from core.db.models import DEFAULT_PROJECT_ID, Job, JobStatus, Model
from core.job_config import JobConfig
from worker.pipeline.records.recorder import JobRecorder
from worker.pipeline.results import JobOutcome


def _queued_job(session: Session) -> uuid.UUID:
    model = Model(project_id=DEFAULT_PROJECT_ID, name="m", sha256=uuid.uuid4().hex * 2,
                  size_bytes=1, storage_uri="store://m", ir_version=8, opset=17,
                  producer="test", inputs=[], outputs=[])
    session.add(model)
    session.flush()
    job = Job(project_id=DEFAULT_PROJECT_ID, model_id=model.id, status=JobStatus.QUEUED,
              config=JobConfig(input_shapes={"x": [1, 4]}).model_dump(mode="json"))
    session.add(job)
    session.flush()
    return job.id


def test_an_internal_error_fails_the_job_saying_it_is_not_the_models_fault(
        db_session: Session) -> None:
    sessions = sessionmaker(bind=db_session.connection(), join_transaction_mode="create_savepoint",
                            expire_on_commit=False)
    job_id = _queued_job(db_session)
    recorder = JobRecorder(job_id, sessions)
    assert recorder.claim("test-worker") is not None

    assert recorder.fail_internally(KeyError("input"))

    db_session.expire_all()
    job = db_session.get(Job, job_id)
    assert job is not None and job.status == JobStatus.FAILED
    assert job.error_code == "InternalError"
    assert job.error_message == (
        "FuseForge failed internally (KeyError: 'input'); this is not a fault in your model. "
        f"The worker log has the traceback for job {job_id}.")
    # Its outcome: nothing shipped, and why (issue 45).
    assert job.outcome is not None and job.outcome["shipped"] is None
    assert job.outcome["headline"].startswith(
        "Failed (InternalError), nothing shipped (onnxruntime fp32 asked): FuseForge failed "
        "internally (KeyError: 'input'); this is not a fault in your model.")


def test_a_job_that_ships_its_original_records_that_outcome(db_session: Session) -> None:
    sessions = sessionmaker(bind=db_session.connection(), join_transaction_mode="create_savepoint",
                            expire_on_commit=False)
    job_id = _queued_job(db_session)
    recorder = JobRecorder(job_id, sessions)
    assert recorder.claim("test-worker") is not None
    result = JobOutcome(original_shipped="no engine that validated beat the original")

    assert recorder.succeed(result, [])

    db_session.expire_all()
    job = db_session.get(Job, job_id)
    assert job is not None and job.status == JobStatus.SUCCEEDED
    assert job.outcome is not None
    assert job.outcome["shipped"]["what"] == "original"
    assert job.outcome["why"] == "no engine that validated beat the original."
    assert job.outcome["headline"] == ("Shipped your original model unchanged (onnxruntime "
                                       "fp32 asked): no engine that validated beat the original.")
