"""Add jobs.outcome: what a finished job asked for and shipped, its speed-up and accuracy
verdicts, and the headline sentence every surface prints (core/outcome.py).

Revision ID: 0028
Revises: 0027
Create Date: 2026-12-07 12:00:00+00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0028"
down_revision: str | None = "0027"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


# Plain ALTER TABLE, not a batch rebuild: SQLite (3.35+) adds and drops a column in place,
# and rebuilding `jobs` would break the foreign keys of the tables naming it.
def upgrade() -> None:
    op.add_column("jobs", sa.Column("outcome", sa.JSON(), nullable=True))


def downgrade() -> None:
    op.drop_column("jobs", "outcome")
