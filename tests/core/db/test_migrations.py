"""The migrations build exactly the ORM's schema, and go down and up again cleanly."""

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import JSON, Engine, Uuid, bindparam, column, insert, inspect, select, table
from sqlalchemy.orm import Session

from core.db.models import DEFAULT_PROJECT_ID, Base, Dataset, DatasetRole, Job, Model, Project
from core.db.types import UtcDateTime, utc_now
from tests.support.databases import fresh_database, run_alembic

TABLES = {
    "models", "jobs", "artifacts", "validation_results", "benchmark_records", "job_events", "datasets",
    "workers", "webhook_deliveries", "projects", "api_keys", "calibrations",
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
    # Rows as revision 0011 knew them (the ORM follows the head).
    model_id = _insert_model(empty_engine)
    ids = (_insert_job(empty_engine, model_id, {"backend": "tensorrt",
                                                "ort_optimization_level": "all"}),
           _insert_job(empty_engine, model_id, {"backend": "onnxruntime",
                                                "ort_optimization_level": "basic"}))

    def stored_levels() -> tuple[object, ...]:
        jobs = table("jobs", column("id", Uuid), column("config", JSON))
        with empty_engine.connect() as connection:
            return tuple(connection.execute(select(jobs.c.config).where(jobs.c.id == job_id))
                         .scalar_one()["ort_optimization_level"] for job_id in ids)

    run_alembic(empty_engine, "upgrade", "head")
    assert stored_levels() == (None, "basic")
    run_alembic(empty_engine, "downgrade", "0011")
    assert stored_levels() == ("all", "basic")


def test_rows_from_before_projects_belong_to_the_default_project(empty_engine: Engine) -> None:
    run_alembic(empty_engine, "upgrade", "0012")
    model_id = _insert_model(empty_engine)
    job_id = _insert_job(empty_engine, model_id, {"backend": "onnxruntime"})

    run_alembic(empty_engine, "upgrade", "head")

    with Session(empty_engine) as session:
        assert session.get_one(Model, model_id).project_id == DEFAULT_PROJECT_ID
        assert session.get_one(Job, job_id).project_id == DEFAULT_PROJECT_ID
        assert session.get_one(Project, DEFAULT_PROJECT_ID).name == "default"


def test_a_projects_default_webhook_goes_on_downgrade_and_its_rows_stay(
        empty_engine: Engine) -> None:
    run_alembic(empty_engine, "upgrade", "head")
    with Session(empty_engine) as session, session.begin():
        session.get_one(Project, DEFAULT_PROJECT_ID).default_callback_url = "https://h.example/x"
        model_id = uuid.uuid4()  # a row that references the project
        session.add(Model(id=model_id, project_id=DEFAULT_PROJECT_ID, name="m", sha256="0" * 64,
                          size_bytes=1, storage_uri="store://m", ir_version=8, opset=17,
                          producer="test", inputs=[], outputs=[]))

    run_alembic(empty_engine, "downgrade", "0016")

    columns = {c["name"] for c in inspect(empty_engine).get_columns("projects")}
    assert "default_callback_url" not in columns
    models = table("models", column("id", Uuid))
    with empty_engine.connect() as connection:
        assert connection.execute(select(models.c.id)).scalars().all() == [model_id]
    run_alembic(empty_engine, "upgrade", "head")
    with Session(empty_engine) as session:
        assert session.get_one(Project, DEFAULT_PROJECT_ID).default_callback_url is None


def test_datasets_from_before_roles_are_validation_datasets(empty_engine: Engine) -> None:
    run_alembic(empty_engine, "upgrade", "0020")
    dataset_id = uuid.uuid4()
    datasets = table("datasets", *(column(name) for name in (
        "id", "project_id", "name", "sha256", "size_bytes", "storage_uri", "samples", "arrays",
        "has_labels", "created_at")))
    with empty_engine.begin() as connection:
        connection.execute(insert(datasets).values(
            id=bindparam("id", type_=Uuid()), project_id=bindparam("project_id", type_=Uuid()),
            name="d.npz", sha256="0" * 64, size_bytes=1, storage_uri="store://d", samples=2,
            arrays=bindparam("arrays", type_=JSON()), has_labels=False,
            created_at=bindparam("created_at", type_=UtcDateTime())),
            {"id": dataset_id, "project_id": DEFAULT_PROJECT_ID, "arrays": [],
             "created_at": utc_now()})

    run_alembic(empty_engine, "upgrade", "head")

    with Session(empty_engine) as session:
        assert session.get_one(Dataset, dataset_id).role == DatasetRole.VALIDATION
    run_alembic(empty_engine, "downgrade", "0020")
    assert "role" not in {c["name"] for c in inspect(empty_engine).get_columns("datasets")}
    assert "calibrations" not in inspect(empty_engine).get_table_names()


def _insert_model(engine: Engine) -> uuid.UUID:
    model_id = uuid.uuid4()
    models = table("models", *(column(name) for name in (
        "id", "name", "sha256", "size_bytes", "storage_uri", "ir_version", "opset", "producer",
        "inputs", "outputs", "created_at")))
    with engine.begin() as connection:
        connection.execute(insert(models).values(
            id=bindparam("id", type_=Uuid()), name="m", sha256="0" * 64, size_bytes=1,
            storage_uri="store://m", ir_version=8, opset=17, producer="test",
            inputs=bindparam("inputs", type_=JSON()), outputs=bindparam("outputs", type_=JSON()),
            created_at=bindparam("created_at", type_=UtcDateTime())),
            {"id": model_id, "inputs": [], "outputs": [], "created_at": utc_now()})
    return model_id


def _insert_job(engine: Engine, model_id: uuid.UUID, config: dict[str, object]) -> uuid.UUID:
    job_id = uuid.uuid4()
    jobs = table("jobs", *(column(name) for name in (
        "id", "model_id", "config", "status", "progress", "attempts", "created_at")))
    with engine.begin() as connection:
        connection.execute(insert(jobs).values(
            id=bindparam("id", type_=Uuid()), model_id=bindparam("model_id", type_=Uuid()),
            config=bindparam("config", type_=JSON()), status="queued", progress=0.0, attempts=0,
            created_at=bindparam("created_at", type_=UtcDateTime())),
            {"id": job_id, "model_id": model_id, "config": config, "created_at": utc_now()})
    return job_id
