"""Add jobs.stage_memory: the job process's peak resident memory in each stage it ran.

Revision ID: 0025
Revises: 0024
Create Date: 2026-12-06 20:00:00+00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0025"
down_revision: str | None = "0024"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


# Plain ALTER TABLE, not a batch rebuild: SQLite (3.35+) adds and drops a column in place,
# and rebuilding `jobs` would break the foreign keys of the tables naming it.
def upgrade() -> None:
    op.add_column("jobs", sa.Column("stage_memory", sa.JSON(), nullable=True))


def downgrade() -> None:
    op.drop_column("jobs", "stage_memory")
