"""Add projects.default_callback_url: the webhook of a project's jobs submitted without one.

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-02 11:00:00+00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0019"
down_revision: str | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


# Plain ALTER TABLE, no batch: a batch rebuild of `projects` on SQLite would drop a table that
# api_keys, models, datasets and jobs reference (see 0016). SQLite adds and (3.35+) drops a
# column in place.
def upgrade() -> None:
    op.add_column("projects", sa.Column("default_callback_url", sa.Text(), nullable=True))


def downgrade() -> None:
    op.drop_column("projects", "default_callback_url")
