"""Engines and sessions for the configured database (PostgreSQL or the embedded SQLite file)."""

from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker

from core.settings import get_settings

__all__ = ["get_engine", "get_sessionmaker", "make_engine", "session_scope"]


def make_engine(url: str) -> Engine:
    """An engine for `url`; SQLite gets WAL, a busy timeout, foreign keys and real savepoints."""
    parsed = make_url(url)
    if not parsed.get_backend_name() == "sqlite":
        return create_engine(url, pool_pre_ping=True)
    if parsed.database and parsed.database != ":memory:":
        Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(url, connect_args={"timeout": 30})
    _make_sqlite_behave(engine)
    return engine


def _make_sqlite_behave(engine: Engine) -> None:
    # pysqlite starts transactions lazily and breaks SAVEPOINT; take over BEGIN ourselves, as the
    # SQLAlchemy docs recommend ("Serializable isolation / Savepoints / Transactional DDL").
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA journal_mode=WAL")  # API and worker write the same file
        cursor.execute("PRAGMA busy_timeout=30000")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Any) -> None:
        connection.exec_driver_sql("BEGIN IMMEDIATE")


@lru_cache
def get_engine() -> Engine:
    return make_engine(get_settings().resolved_database_url)


@lru_cache
def get_sessionmaker() -> sessionmaker[Session]:
    return sessionmaker(bind=get_engine(), expire_on_commit=False)


@contextmanager
def session_scope() -> Iterator[Session]:
    """A short transaction: commit on success, roll back on error. Never hold one across GPU work."""
    with get_sessionmaker()() as session, session.begin():
        yield session
