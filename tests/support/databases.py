"""Create, migrate and drop real test databases."""

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.engine import make_url

from core.db.session import make_engine
from tests.support.database_templates import copy_migrated_postgres, copy_migrated_sqlite

__all__ = [
    "PG_ADMIN_URL",
    "alembic_config",
    "create_postgres_database",
    "drop_postgres_database",
    "fresh_database",
    "migrated_engine",
    "migrated_postgres_database",
    "migrated_sqlite_file",
    "run_alembic",
]

# The test machine's PostgreSQL: trust auth on 127.0.0.1 (scripts/test-services.sh starts it).
PG_ADMIN_URL = os.environ.get(
    "FUSEFORGE_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _admin_engine() -> Engine:
    return create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")


def create_postgres_database(name: str) -> str:
    admin = _admin_engine()
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    admin.dispose()
    return make_url(PG_ADMIN_URL).set(database=name).render_as_string(hide_password=False)


def drop_postgres_database(url: str) -> None:
    name = make_url(url).database
    admin = _admin_engine()
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


def alembic_config() -> Config:
    return Config(os.path.join(REPO_ROOT, "alembic.ini"))


def run_alembic(engine: Engine, *revision_command: str) -> None:
    """`run_alembic(engine, "upgrade", "head")` against exactly this engine's database."""
    verb, revision = revision_command
    config = alembic_config()
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        getattr(command, verb)(config, revision)


def _upgrade(engine: Engine) -> None:
    run_alembic(engine, "upgrade", "head")


def migrated_sqlite_file(path: Path) -> str:
    """Write a migrated SQLite database to `path` (as `fuseforge migrate` would leave it, but a
    copy of one migrated per test process, without starting the CLI); its URL."""
    path.parent.mkdir(parents=True, exist_ok=True)
    return copy_migrated_sqlite(path, _upgrade)


def migrated_postgres_database(name: str) -> str:
    """Create the database `name` on the test PostgreSQL at the schema's head (a copy of one
    migrated per test process); its URL. Drop it with drop_postgres_database."""
    return copy_migrated_postgres(PG_ADMIN_URL, name, _upgrade)


def migrated_engine(url: str) -> Engine:
    engine = make_engine(url)
    run_alembic(engine, "upgrade", "head")
    return engine


@contextmanager
def fresh_database(dialect: str, directory: Path, *, name: str,
                   migrated: bool = True) -> Iterator[Engine]:
    """An engine on a new, empty database of its own ("sqlite": a file in `directory`;
    "postgresql": a database called `name` plus a random suffix), at the schema's head when
    `migrated` (a copy of one migrated database, tests/support/database_templates.py);
    disposed (and the PostgreSQL database dropped) afterwards."""
    path = directory / f"{name}.sqlite"
    database = f"{name}_{uuid.uuid4().hex[:8]}"
    if migrated:
        url = (copy_migrated_sqlite(path, _upgrade) if dialect == "sqlite"
               else copy_migrated_postgres(PG_ADMIN_URL, database, _upgrade))
    else:
        url = f"sqlite:///{path}" if dialect == "sqlite" else create_postgres_database(database)
    engine = make_engine(url)
    try:
        yield engine
    finally:
        engine.dispose()
        if dialect != "sqlite":
            drop_postgres_database(url)
