"""The migrations build exactly the ORM's schema, and go down and up again cleanly."""

from collections.abc import Iterator
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import Engine, inspect
from sqlalchemy.orm import Session

from core.db.models import Base, Job, Model
from tests.support.databases import fresh_database, run_alembic

TABLES = {
    "models", "jobs", "artifacts", "validation_results", "benchmark_records", "job_events", "datasets",
    "workers", "webhook_deliveries",
}


@pytest.fixture(params=["sqlite", "postgresql"])
def empty_engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Engine]:
    with fresh_database(request.param, tmp_path, name="fuseforge_migrations",
                        migrated=False) as engine:
        yield engine


def _schema_diff(engine: Engine) -> list[object]:
    with engine.connect() as connection:
        context = MigrationContext.configure(connection, opts={"compare_type": True})
        return list(compare_metadata(context, Base.metadata))


def test_upgrade_downgrade_upgrade_leaves_no_autogenerate_diff(empty_engine: Engine) -> None:
    run_alembic(empty_engine, "upgrade", "head")
    assert TABLES <= set(inspect(empty_engine).get_table_names())
    assert _schema_diff(empty_engine) == []

    run_alembic(empty_engine, "downgrade", "base")
    assert set(inspect(empty_engine).get_table_names()) & TABLES == set()

    run_alembic(empty_engine, "upgrade", "head")
    assert _schema_diff(empty_engine) == []


def test_tensorrt_jobs_stored_with_an_ort_level_lose_it_and_get_it_back_on_downgrade(
    empty_engine: Engine,
) -> None:
    run_alembic(empty_engine, "upgrade", "0011")
    model = Model(name="m", sha256="0" * 64, size_bytes=1, storage_uri="store://m", ir_version=8,
                  opset=17, producer="test", inputs=[], outputs=[])
    tensorrt = Job(model=model, config={"backend": "tensorrt", "ort_optimization_level": "all"})
    onnxruntime = Job(model=model, config={"backend": "onnxruntime", "ort_optimization_level": "basic"})
    with Session(empty_engine, expire_on_commit=False) as session, session.begin():
        session.add_all([tensorrt, onnxruntime])
    ids = (tensorrt.id, onnxruntime.id)

    def stored_levels() -> tuple[object, ...]:
        with Session(empty_engine) as session:
            return tuple(session.get_one(Job, job_id).config["ort_optimization_level"]
                         for job_id in ids)

    run_alembic(empty_engine, "upgrade", "head")
    assert stored_levels() == (None, "basic")
    run_alembic(empty_engine, "downgrade", "0011")
    assert stored_levels() == ("all", "basic")
