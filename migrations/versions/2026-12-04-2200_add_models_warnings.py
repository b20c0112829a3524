"""Add models.warnings: what the upload check found valid but suspect (weights holding NaN or
infinity), shown with the model and on its jobs.

Revision ID: 0024
Revises: 0023
Create Date: 2026-12-04 22:00:00+00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0024"
down_revision: str | None = "0023"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


# Plain ALTER TABLE, not a batch rebuild: SQLite (3.35+) adds and drops a column in place,
# and rebuilding `models` would break the foreign keys of the jobs and datasets naming it.
def upgrade() -> None:
    op.add_column("models", sa.Column("warnings", sa.JSON(), nullable=True))


def downgrade() -> None:
    op.drop_column("models", "warnings")
