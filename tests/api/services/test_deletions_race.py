"""A delete and a job created for the same model at the same moment take turns: a job that got
there first makes the delete refuse (409, naming it); a delete that got there first makes the
job's model "not found". Never a job left on a deleted model. Real databases, two sessions on
two threads."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session, sessionmaker

from api.services.deletions import delete_model
from api.services.errors import ModelInUse, ModelNotFound
from api.services.models import get_model
from core.db.models import DEFAULT_PROJECT_ID, Job, Model
from core.job_config import JobConfig
from core.storage import LocalArtifactStore
from tests.support.databases import fresh_database

_HOLD_S = 0.5  # how long the first transaction keeps the row after the other one started


@pytest.fixture(params=["sqlite", "postgresql"])
def sessions(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[sessionmaker[Session]]:
    with fresh_database(request.param, tmp_path, name="fuseforge_race") as engine:
        yield sessionmaker(bind=engine, expire_on_commit=False)


@pytest.fixture
def model_id(sessions: sessionmaker[Session]) -> uuid.UUID:
    with sessions() as session, session.begin():
        model = Model(project_id=DEFAULT_PROJECT_ID, name="m", sha256="a" * 64, size_bytes=1,
                      storage_uri="store://models/m.onnx", ir_version=8, opset=17,
                      producer="test", inputs=[], outputs=[])
        session.add(model)
    return model.id


def _create_job(session: Session, model_id: uuid.UUID, started: threading.Event) -> uuid.UUID:
    """What POST /v1/jobs does to the model's row: read it under a share lock, insert a job."""
    get_model(session=session, project_id=DEFAULT_PROJECT_ID, model_id=model_id, share_lock=True)
    job = Job(project_id=DEFAULT_PROJECT_ID, model_id=model_id,
              config=JobConfig().model_dump(mode="json"))
    session.add(job)
    session.flush()
    started.set()
    time.sleep(_HOLD_S)
    session.commit()
    return job.id


def test_a_job_created_first_makes_the_delete_wait_and_refuse(
        sessions: sessionmaker[Session], model_id: uuid.UUID, tmp_path: Path) -> None:
    started = threading.Event()
    created: list[uuid.UUID] = []

    def create() -> None:
        with sessions() as session:
            created.append(_create_job(session, model_id, started))

    thread = threading.Thread(target=create)
    thread.start()
    assert started.wait(10)
    with sessions() as session, pytest.raises(ModelInUse) as refused:
        delete_model(session=session, store=LocalArtifactStore(tmp_path), project_id=DEFAULT_PROJECT_ID,
                     model_id=model_id)
    thread.join()

    assert str(created[0]) in str(refused.value)
    with sessions() as session:
        assert session.get(Model, model_id) is not None


def test_a_delete_first_makes_the_new_job_find_no_model(
        sessions: sessionmaker[Session], model_id: uuid.UUID) -> None:
    deleting = threading.Event()
    outcome: list[BaseException | None] = []

    def create() -> None:
        assert deleting.wait(10)
        with sessions() as session:
            try:
                _create_job(session, model_id, threading.Event())
                outcome.append(None)
            except ModelNotFound as err:
                outcome.append(err)

    thread = threading.Thread(target=create)
    thread.start()
    with sessions() as session:  # what delete_model does to the row: lock it, delete it, commit
        session.scalars(select(Model).where(Model.id == model_id).with_for_update()).one()
        deleting.set()
        time.sleep(_HOLD_S)
        session.execute(delete(Model).where(Model.id == model_id))
        session.commit()
    thread.join()

    assert isinstance(outcome[0], ModelNotFound)
    with sessions() as session:
        assert session.scalar(select(func.count()).select_from(Job)) == 0
