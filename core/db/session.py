"""Engines and sessions for the configured database (PostgreSQL or the embedded SQLite file).

Reads and writes get separate SQLite engines. A write transaction takes SQLite's write lock up
front (BEGIN IMMEDIATE), so two writers queue on the busy timeout instead of one failing to
upgrade its read snapshot; a read transaction must not, or every status read would queue behind
every other request on that one lock. Reads begin DEFERRED on connections set to query_only:
with WAL they run beside a writer. PostgreSQL needs neither: both names give its one engine.
"""

from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker

from core.settings import get_settings

__all__ = ["get_engine", "get_read_sessionmaker", "get_sessionmaker", "make_engine",
           "session_scope"]

# FastAPI runs sync routes on 40 threads: one connection each, so a burst queues for a thread
# (back-pressure) and never times out waiting for a connection.
_POOL_SIZE = 40
_POSTGRES_POOL_SIZE = 20  # several processes share PostgreSQL's 100 connections


def make_engine(url: str, *, reads_only: bool = False) -> Engine:
    """An engine for `url`; SQLite gets WAL, a busy timeout, foreign keys and real savepoints,
    and with `reads_only` deferred transactions on query_only connections."""
    parsed = make_url(url)
    if not parsed.get_backend_name() == "sqlite":
        return create_engine(url, pool_pre_ping=True, pool_size=_POSTGRES_POOL_SIZE,
                             max_overflow=_POSTGRES_POOL_SIZE)
    if parsed.database and parsed.database != ":memory:":
        Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(url, connect_args={"timeout": 30, "check_same_thread": False},
                           pool_size=_POOL_SIZE, max_overflow=_POOL_SIZE)
    _make_sqlite_behave(engine, reads_only=reads_only)
    return engine


def _make_sqlite_behave(engine: Engine, *, reads_only: bool) -> None:
    # pysqlite starts transactions lazily and breaks SAVEPOINT; take over BEGIN ourselves, as the
    # SQLAlchemy docs recommend ("Serializable isolation / Savepoints / Transactional DDL").
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA journal_mode=WAL")  # API and worker write the same file
        cursor.execute("PRAGMA busy_timeout=30000")
        if reads_only:
            cursor.execute("PRAGMA query_only=ON")
        cursor.close()

    begin = "BEGIN" if reads_only else "BEGIN IMMEDIATE"

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Any) -> None:
        connection.exec_driver_sql(begin)


@lru_cache
def get_engine() -> Engine:
    return make_engine(get_settings().resolved_database_url)


@lru_cache
def get_sessionmaker() -> sessionmaker[Session]:
    return sessionmaker(bind=get_engine(), expire_on_commit=False)


@lru_cache
def get_read_sessionmaker() -> sessionmaker[Session]:
    """Sessions for reads only (a write through one fails): on SQLite they take no lock."""
    url = get_settings().resolved_database_url
    if make_url(url).get_backend_name() != "sqlite":
        return get_sessionmaker()
    return sessionmaker(bind=make_engine(url, reads_only=True), expire_on_commit=False)


@contextmanager
def session_scope() -> Iterator[Session]:
    """A short transaction: commit on success, roll back on error. Never hold one across GPU work."""
    with get_sessionmaker()() as session, session.begin():
        yield session
