"""Models, datasets and jobs belong to a project: add project_id (existing rows: the "default"
project), and keep an upload once per project and content hash rather than once overall.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-01 22:31:00+00:00
"""

import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

import sqlalchemy as sa
from alembic import op
from alembic.operations import BatchOperations

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

DEFAULT_PROJECT_ID = uuid.UUID("00000000-0000-0000-0000-000000000001")  # created by 0013
_UPLOADS = ("models", "datasets")


@contextmanager
def _rows_parked(table: str) -> Iterator[None]:
    """On SQLite, rebuild `table` empty: a batch rebuild drops the old table, which with rows
    that other tables reference fails the foreign keys at commit (they cannot be switched off
    inside the migration's transaction). So the rows wait in a copy, the table is dropped and
    made again empty (while deferred checks count the referencing rows as orphans), the block
    changes it, and the rows come back (which settles that count). Elsewhere: nothing to do."""
    bind = op.get_bind()
    if bind.dialect.name != "sqlite":
        yield
        return
    parked = f"_parked_{table}"
    ddl = [sql for (sql,) in bind.exec_driver_sql(
        "SELECT sql FROM sqlite_master WHERE tbl_name = ? AND sql IS NOT NULL "
        "ORDER BY type = 'index'", (table,))]
    bind.exec_driver_sql("PRAGMA defer_foreign_keys = ON")
    bind.exec_driver_sql(f"CREATE TABLE {parked} AS SELECT * FROM {table}")
    bind.exec_driver_sql(f"DROP TABLE {table}")
    for statement in ddl:
        bind.exec_driver_sql(statement)
    yield
    kept = _columns(parked) & _columns(table)
    columns = ", ".join(sorted(kept))
    bind.exec_driver_sql(f"INSERT INTO {table} ({columns}) SELECT {columns} FROM {parked}")
    bind.exec_driver_sql(f"DROP TABLE {parked}")


def _columns(table: str) -> set[str]:
    return {c["name"] for c in sa.inspect(op.get_bind()).get_columns(table)}


def _alter(table: str, change: Callable[[BatchOperations], None]) -> None:
    with _rows_parked(table), op.batch_alter_table(table) as batch_op:
        change(batch_op)


def _add_project_id(table: str) -> None:
    # Nullable first, filled, then NOT NULL: a server default would outlive the migration.
    with op.batch_alter_table(table) as batch_op:
        batch_op.add_column(sa.Column("project_id", sa.Uuid(), nullable=True))
    rows = sa.table(table, sa.column("project_id", sa.Uuid()))
    op.execute(rows.update().values(project_id=DEFAULT_PROJECT_ID))

    def change(batch_op: BatchOperations) -> None:
        batch_op.alter_column("project_id", existing_type=sa.Uuid(), nullable=False)
        batch_op.create_foreign_key(op.f(f"fk_{table}_project_id_projects"), "projects",
                                    ["project_id"], ["id"], ondelete="RESTRICT")
        batch_op.create_index(op.f(f"ix_{table}_project_id"), ["project_id"], unique=False)
        if table in _UPLOADS:
            batch_op.drop_constraint(op.f(f"uq_{table}_sha256"), type_="unique")
            batch_op.create_unique_constraint(op.f(f"uq_{table}_project_id_sha256"),
                                              ["project_id", "sha256"])

    _alter(table, change)


def _drop_project_id(table: str) -> None:
    def change(batch_op: BatchOperations) -> None:
        if table in _UPLOADS:
            # Fails where two projects hold the same bytes: one project's copy must go first.
            batch_op.drop_constraint(op.f(f"uq_{table}_project_id_sha256"), type_="unique")
            batch_op.create_unique_constraint(op.f(f"uq_{table}_sha256"), ["sha256"])
        batch_op.drop_index(op.f(f"ix_{table}_project_id"))
        batch_op.drop_constraint(op.f(f"fk_{table}_project_id_projects"), type_="foreignkey")
        batch_op.drop_column("project_id")

    _alter(table, change)


def upgrade() -> None:
    for table in ("models", "datasets", "jobs"):
        _add_project_id(table)


def downgrade() -> None:
    for table in ("jobs", "datasets", "models"):
        _drop_project_id(table)
