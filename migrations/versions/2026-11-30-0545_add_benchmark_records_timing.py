"""Add benchmark_records.timing and device_memory_mb: which clock timed a run, and the device
memory an engine held.

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-30 05:45:00+00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("benchmark_records") as batch_op:
        batch_op.add_column(sa.Column("timing", sa.String(length=32), nullable=True))
        batch_op.add_column(sa.Column("device_memory_mb", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("benchmark_records") as batch_op:
        batch_op.drop_column("device_memory_mb")
        batch_op.drop_column("timing")
