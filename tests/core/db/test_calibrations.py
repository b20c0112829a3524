"""Stored calibrations: found by (model, dataset, method, graph), recorded once, the loser of
a race given the winner's row."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from core.db.calibrations import find_calibration, record_calibration
from core.db.models import DEFAULT_PROJECT_ID, Calibration, Dataset, DatasetRole, Model
from tests.support.databases import fresh_database

GRAPH = "a" * 64


@pytest.fixture(params=["sqlite", "postgresql"])
def sessions(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[sessionmaker[Session]]:
    with fresh_database(request.param, tmp_path, name="fuseforge_calibrations") as engine:
        yield sessionmaker(bind=engine, expire_on_commit=False)


@pytest.fixture
def model_and_dataset(sessions: sessionmaker[Session]) -> tuple[uuid.UUID, uuid.UUID]:
    with sessions() as session:
        model = Model(project_id=DEFAULT_PROJECT_ID, name="m.onnx", sha256="m" * 64,
                      size_bytes=1, storage_uri="file:///m", ir_version=10, opset=17,
                      producer="test", inputs=[], outputs=[])
        dataset = Dataset(project_id=DEFAULT_PROJECT_ID, name="c.npz", sha256="d" * 64,
                          size_bytes=1, storage_uri="file:///d", samples=4, arrays=[],
                          has_labels=False, role=DatasetRole.CALIBRATION)
        session.add_all([model, dataset])
        session.commit()
        return model.id, dataset.id


def _record(session: Session, ids: tuple[uuid.UUID, uuid.UUID], uri: str,
            method: str = "minmax") -> Calibration:
    model_id, dataset_id = ids
    return record_calibration(session, project_id=DEFAULT_PROJECT_ID, model_id=model_id,
                              dataset_id=dataset_id, method=method, graph_sha256=GRAPH,
                              storage_uri=uri, sha256="s" * 64, size_bytes=10, samples=4)


def _find(session: Session, ids: tuple[uuid.UUID, uuid.UUID],
          method: str = "minmax") -> Calibration | None:
    return find_calibration(session, model_id=ids[0], dataset_id=ids[1], method=method,
                            graph_sha256=GRAPH, samples=4)


def test_a_recorded_calibration_is_found_by_its_key_and_only_by_it(
        sessions: sessionmaker[Session], model_and_dataset: tuple[uuid.UUID, uuid.UUID]) -> None:
    with sessions() as session:
        assert _find(session, model_and_dataset) is None
        row = _record(session, model_and_dataset, "file:///cal/1")
        session.commit()
    with sessions() as session:
        found = _find(session, model_and_dataset)
        assert found is not None and found.id == row.id and found.storage_uri == "file:///cal/1"
        assert _find(session, model_and_dataset, method="entropy") is None


def test_recording_the_same_calibration_again_returns_the_first_row(
        sessions: sessionmaker[Session], model_and_dataset: tuple[uuid.UUID, uuid.UUID]) -> None:
    with sessions() as session:
        first = _record(session, model_and_dataset, "file:///cal/1")
        session.commit()
    with sessions() as session:
        again = _record(session, model_and_dataset, "file:///cal/2")
        session.commit()
        assert (again.id, again.storage_uri) == (first.id, "file:///cal/1")
        assert session.scalar(select(func.count()).select_from(Calibration)) == 1


def test_the_loser_of_a_race_gets_the_winners_row_and_keeps_its_transaction(
        sessions: sessionmaker[Session], model_and_dataset: tuple[uuid.UUID, uuid.UUID]) -> None:
    with sessions() as loser, sessions() as winner:
        # Both looked and found none (a read ends its transaction: SQLite's BEGIN IMMEDIATE
        # would hold the other's write back).
        assert _find(loser, model_and_dataset) is None
        loser.rollback()
        assert _find(winner, model_and_dataset) is None
        won = _record(winner, model_and_dataset, "file:///cal/winner")
        winner.commit()
        other = _record(loser, model_and_dataset, "file:///cal/entropy", method="entropy")

        got = _record(loser, model_and_dataset, "file:///cal/loser")

        assert (got.id, got.storage_uri) == (won.id, "file:///cal/winner")
        loser.commit()  # the SAVEPOINT's rollback left the loser's other insert in place
    with sessions() as session:
        rows = session.scalars(select(Calibration).order_by(Calibration.method)).all()
        assert [(r.method, r.storage_uri) for r in rows] == [
            ("entropy", other.storage_uri), ("minmax", "file:///cal/winner")]


def test_a_calibration_goes_with_its_dataset(
        sessions: sessionmaker[Session], model_and_dataset: tuple[uuid.UUID, uuid.UUID]) -> None:
    with sessions() as session:
        _record(session, model_and_dataset, "file:///cal/1")
        session.commit()
        session.delete(session.get_one(Dataset, model_and_dataset[1]))
        session.commit()
        assert session.scalar(select(func.count()).select_from(Calibration)) == 0
