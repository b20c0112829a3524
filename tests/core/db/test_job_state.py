"""Job state moves are guarded: a repeated or late move changes nothing."""

from datetime import timedelta

from sqlalchemy.orm import Session

from core.db import job_state
from core.db.models import DEFAULT_PROJECT_ID, Job, JobStatus, Model
from core.db.types import utc_now


def _queued_job(session: Session) -> Job:
    model = Model(
        project_id=DEFAULT_PROJECT_ID, name="m.onnx", sha256="0" * 64, size_bytes=1, storage_uri="store://models/x.onnx",
        ir_version=10, opset=17, producer="test", inputs=[], outputs=[],
    )
    session.add(model)
    session.flush()
    job = Job(project_id=DEFAULT_PROJECT_ID, model_id=model.id, config={"backend": "onnxruntime"})
    session.add(job)
    session.flush()
    return job


def test_claim_runs_a_queued_job_only_once(db_session: Session) -> None:
    job = _queued_job(db_session)
    first = job_state.claim(db_session, job.id, "worker-a")
    second = job_state.claim(db_session, job.id, "worker-b")
    assert first is not None and first.status == JobStatus.RUNNING and first.worker == "worker-a"
    assert first.attempts == 1 and first.started_at is not None
    assert second is None


def test_a_worker_whose_job_was_sent_to_another_moves_it_no_more(db_session: Session) -> None:
    job = _queued_job(db_session)
    job_state.claim(db_session, job.id, "host-a:1")
    assert job_state.requeue(db_session, job.id, "host-a stopped sending heartbeats") is not None
    again = job_state.claim(db_session, job.id, "host-b:2")
    assert again is not None and again.attempts == 2

    # host-a comes back from a network cut: none of its writes lands
    assert not job_state.heartbeat(db_session, job.id, owner="host-a:1")
    assert not job_state.start_stage(db_session, job.id, "store", 0.9, owner="host-a:1")
    assert job_state.succeed(db_session, job.id, owner="host-a:1") is None
    assert job_state.fail(db_session, job.id, "X", "late", owner="host-a:1") is None
    assert job_state.requeue(db_session, job.id, "late", owner="host-a:1") is None

    assert job_state.heartbeat(db_session, job.id, owner="host-b:2")
    done = job_state.succeed(db_session, job.id, owner="host-b:2")
    assert done is not None and done.status == JobStatus.SUCCEEDED and done.worker == "host-b:2"


def test_cancelled_job_cannot_be_claimed_or_succeed(db_session: Session) -> None:
    job = _queued_job(db_session)
    assert job_state.cancel(db_session, job.id) is not None
    assert job_state.claim(db_session, job.id, "w") is None
    assert job_state.succeed(db_session, job.id) is None
    assert db_session.get(Job, job.id).status == JobStatus.CANCELLED  # type: ignore[union-attr]


def test_running_job_cancelled_midway_stops_at_next_stage(db_session: Session) -> None:
    job = _queued_job(db_session)
    job_state.claim(db_session, job.id, "w")
    assert job_state.start_stage(db_session, job.id, "load", 0.05)
    job_state.cancel(db_session, job.id)
    assert not job_state.start_stage(db_session, job.id, "build_engine", 0.15)
    assert not job_state.heartbeat(db_session, job.id)


def test_finished_job_is_not_cancellable_or_failable(db_session: Session) -> None:
    job = _queued_job(db_session)
    job_state.claim(db_session, job.id, "w")
    assert job_state.succeed(db_session, job.id) is not None
    assert job_state.cancel(db_session, job.id) is None
    assert job_state.fail(db_session, job.id, "X", "late failure") is None
    done = db_session.get(Job, job.id)
    assert done is not None and done.status == JobStatus.SUCCEEDED and done.progress == 1.0


def test_sweep_fails_only_runs_without_recent_heartbeat(db_session: Session) -> None:
    silent, alive = _queued_job(db_session), None
    job_state.claim(db_session, silent.id, "w")
    other_model_job = Job(project_id=DEFAULT_PROJECT_ID, model_id=silent.model_id, config={})
    db_session.add(other_model_job)
    db_session.flush()
    alive = job_state.claim(db_session, other_model_job.id, "w")
    assert alive is not None

    later = utc_now() + timedelta(minutes=20)
    job_state.heartbeat(db_session, alive.id)
    db_session.query(Job).filter(Job.id == alive.id).update({"heartbeat_at": later})
    swept = job_state.sweep_stale(db_session, timedelta(minutes=15), now=later)

    assert swept == [silent.id]
    failed = db_session.get(Job, silent.id, populate_existing=True)
    assert failed is not None and failed.status == JobStatus.FAILED
    assert failed.error_code == "WorkerLost" and "heartbeat" in (failed.error_message or "")


def test_every_move_is_recorded_as_an_event(db_session: Session) -> None:
    job = _queued_job(db_session)
    job_state.claim(db_session, job.id, "w")
    job_state.start_stage(db_session, job.id, "load", 0.05)
    job_state.fail(db_session, job.id, "InvalidModelError", "bad")
    db_session.flush()
    db_session.refresh(job)
    messages = [e.message for e in job.events]
    assert messages == ["claimed by worker w", "stage load started", "failed: InvalidModelError: bad"]
