"""Alembic environment: the URL comes from Settings (or a connection handed in by the caller)."""

from alembic import context
from sqlalchemy import Connection

from core.db.models import Base
from core.db.session import make_engine
from core.settings import get_settings


def _configure_and_run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=Base.metadata,
        render_as_batch=connection.dialect.name == "sqlite",  # SQLite cannot ALTER most things
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    # Tests and `fuseforge migrate` may pass an open connection to migrate that exact database.
    connection = context.config.attributes.get("connection")
    if connection is not None:
        _configure_and_run(connection)
        return
    engine = make_engine(get_settings().resolved_database_url)
    try:
        with engine.connect() as connection:
            _configure_and_run(connection)
    finally:
        engine.dispose()


if context.is_offline_mode():
    raise SystemExit("offline (--sql) migrations are not supported; run them against a database")
run_migrations_online()
