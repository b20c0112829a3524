"""A search job's progress moves through its search, candidate by candidate: the search owns
most of the job's progress (stages.span_of), each candidate an equal part of it in which its
own optimize → build → validate steps move on, and nothing a candidate's step records takes the
job back to where the search started (it once sat at 5% for the whole search). On the real
database, through the recorder every run writes with."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from core.db.models import DEFAULT_PROJECT_ID, Job, JobStatus, Model
from core.job_config import JobConfig
from worker.pipeline.progress import StageProgress
from worker.pipeline.records.recorder import JobRecorder
from worker.pipeline.search_stage import _CandidateProgress
from worker.pipeline.stages import (
    BUILD_ENGINE,
    LOAD,
    OPTIMIZE,
    SEARCH,
    SEARCH_ENDS_AT,
    STORE,
    VALIDATE,
    ProgressSpan,
    span_of,
)


@pytest.fixture
def sessions(db_session: Session) -> sessionmaker[Session]:
    return sessionmaker(bind=db_session.connection(), join_transaction_mode="create_savepoint",
                        expire_on_commit=False)


@pytest.fixture
def job_id(db_session: Session) -> Iterator[uuid.UUID]:
    model = Model(project_id=DEFAULT_PROJECT_ID, name="m", sha256=uuid.uuid4().hex * 2,
                  size_bytes=1, storage_uri="store://m", ir_version=8, opset=17,
                  producer="test", inputs=[], outputs=[])
    db_session.add(model)
    db_session.flush()
    job = Job(project_id=DEFAULT_PROJECT_ID, model_id=model.id,
              config=JobConfig(search={}).model_dump(mode="json"), status=JobStatus.RUNNING.value)
    db_session.add(job)
    db_session.flush()
    yield job.id


def _progress(db_session: Session, job_id: uuid.UUID) -> float:
    db_session.expire_all()
    return float(db_session.scalar(select(Job.progress).where(Job.id == job_id)) or 0.0)


def test_the_search_owns_most_of_a_search_jobs_progress() -> None:
    assert span_of(SEARCH) == ProgressSpan(0.05, 0.1)  # a plain job never enters it
    assert span_of(SEARCH, search=True) == ProgressSpan(0.05, SEARCH_ENDS_AT)
    assert span_of(LOAD, search=True) == span_of(LOAD)
    # the winner's build after it: the table's stages in the same order and proportions
    optimize, store = span_of(OPTIMIZE, search=True), span_of(STORE, search=True)
    assert optimize.start == pytest.approx(SEARCH_ENDS_AT) and store.end == pytest.approx(1.0)
    assert optimize.start < span_of(BUILD_ENGINE, search=True).start < store.start
    assert span_of(OPTIMIZE) == ProgressSpan(0.1, 0.2)  # a plain job's stages are unchanged


def test_each_candidate_moves_the_progress_and_none_takes_it_back(
        sessions: sessionmaker[Session], db_session: Session, job_id: uuid.UUID) -> None:
    progress = StageProgress(JobRecorder(job_id, sessions))
    progress.enter(LOAD)
    search = progress.enter(SEARCH, "search of up to 600 s")
    assert _progress(db_session, job_id) == pytest.approx(0.05)
    seen = []
    candidates = 4
    for at in range(candidates):
        share = search.part(at / candidates, (at + 1) / candidates)
        candidate = _CandidateProgress(progress, f"candidate-{at}", share)
        for stage in (OPTIMIZE, BUILD_ENGINE, VALIDATE):
            step = candidate.enter(stage)
            assert share.start <= step.start <= step.end <= share.end + 1e-9
            seen.append(_progress(db_session, job_id))
        assert progress.report([f"candidate candidate-{at}: timed"], share.end)
        seen.append(_progress(db_session, job_id))

    assert seen == sorted(seen), "the job's progress went back during the search"
    assert seen[-1] == pytest.approx(search.end)
    assert seen[1] > 0.05  # the first candidate's build already moved it
    assert db_session.scalar(select(Job.stage).where(Job.id == job_id)) == SEARCH
