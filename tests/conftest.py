"""Shared fixtures: real PostgreSQL and SQLite databases, migrated once; a rolled-back session
per test; an API client wired to them, holding an API key of a project of its own; the Redis
broker the API sends jobs to."""

import os

# Importing it points FUSEFORGE_BROKER_URL at this run's Redis database.
from tests.support.broker import TEST_REDIS_URL

# Settings are read once per process; point the broker at a test Redis database before any
# api/worker module builds the Celery app from them.
os.environ.setdefault("FUSEFORGE_ENV", "test")
# Tests change jobs behind the API's back and read them at once: no read cache (the tests of
# the cache build their app with one).
os.environ.setdefault("FUSEFORGE_HTTP__READ_CACHE_S", "0")
# Likewise keys: a test revokes one and expects the next request refused.
os.environ.setdefault("FUSEFORGE_AUTH__KEY_CACHE_S", "0")

import uuid  # noqa: E402
from collections.abc import Iterator  # noqa: E402
from contextlib import nullcontext  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
import redis  # noqa: E402
from fastapi.testclient import TestClient  # noqa: E402
from sqlalchemy import Engine  # noqa: E402
from sqlalchemy.orm import Session  # noqa: E402

from api.deps import get_api_settings, get_read_sessions, get_session  # noqa: E402
from api.main import create_app  # noqa: E402
from core.settings import Settings  # noqa: E402
from tests.support.api_keys import TEST_AUTH, bearer, new_key  # noqa: E402
from tests.support.databases import (  # noqa: E402
    create_postgres_database,
    drop_postgres_database,
    migrated_engine,
)
from tests.support.markers import mark_tiers  # noqa: E402


@pytest.hookimpl(tryfirst=True)  # before -m deselects by them
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The tiers (e2e, browser, pipeline, kernels, slow, second_dialect, both_dialects) go on
    by path and fixture; the rule for which tests keep their PostgreSQL copy in `make test` is
    BOTH_DIALECTS in tests/support/markers.py."""
    mark_tiers(items)


@pytest.fixture(scope="session", params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Each database-backed test runs on the embedded SQLite and on real PostgreSQL."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path_factory.mktemp('sqlite') / 'test.sqlite'}"
        return
    url = create_postgres_database(f"fuseforge_test_{uuid.uuid4().hex[:8]}")
    yield url
    drop_postgres_database(url)


@pytest.fixture(scope="session")
def engine(database_url: str) -> Iterator[Engine]:
    engine = migrated_engine(database_url)
    yield engine
    engine.dispose()


@pytest.fixture
def db_session(engine: Engine) -> Iterator[Session]:
    """A session whose commits are savepoints inside one transaction rolled back after the test."""
    with engine.connect() as connection:
        transaction = connection.begin()
        session = Session(
            bind=connection, join_transaction_mode="create_savepoint", expire_on_commit=False
        )
        try:
            yield session
        finally:
            session.close()
            transaction.rollback()


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(env="test", data_dir=tmp_path / "data", broker_url=TEST_REDIS_URL,
                    auth=TEST_AUTH)


@pytest.fixture
def broker() -> Iterator[redis.Redis]:
    """The test Redis database the API sends jobs to, emptied before and after."""
    client = redis.Redis.from_url(TEST_REDIS_URL)
    client.flushdb()
    yield client
    client.flushdb()


@pytest.fixture
def api_key(db_session: Session, settings: Settings) -> tuple[uuid.UUID, str]:
    """(project id, key): the `client` fixture's project and the key it sends."""
    return new_key(db_session, settings)


@pytest.fixture
def anonymous_client(db_session: Session, settings: Settings,
                     broker: redis.Redis) -> Iterator[TestClient]:
    """The API on the test database, sending no API key."""
    app = create_app()
    app.dependency_overrides[get_session] = lambda: db_session
    app.dependency_overrides[get_read_sessions] = lambda: lambda: nullcontext(db_session)
    app.dependency_overrides[get_api_settings] = lambda: settings
    with TestClient(app) as test_client:
        yield test_client


@pytest.fixture
def client(anonymous_client: TestClient, api_key: tuple[uuid.UUID, str]) -> TestClient:
    """The API on the test database, sending the key of a project of its own on every request."""
    anonymous_client.headers.update(bearer(api_key[1]))
    return anonymous_client
