"""Add models.external_data: what an upload of a model with its data files (a tar) holds.

Revision ID: 0026
Revises: 0025
Create Date: 2026-12-07 10:00:00+00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0026"
down_revision: str | None = "0025"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


# Plain ALTER TABLE, not a batch rebuild: SQLite (3.35+) adds and drops a column in place,
# and rebuilding `models` would break the foreign keys of the tables naming it.
def upgrade() -> None:
    op.add_column("models", sa.Column("external_data", sa.JSON(), nullable=True))


def downgrade() -> None:
    op.drop_column("models", "external_data")
