"""Add benchmark_records.suite: "comparison" (original vs engine) or "ablation" (fusion stages).

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30 02:48:00+00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("benchmark_records") as batch_op:
        batch_op.add_column(
            sa.Column("suite", sa.String(length=16), nullable=False, server_default="comparison")
        )


def downgrade() -> None:
    with op.batch_alter_table("benchmark_records") as batch_op:
        batch_op.drop_column("suite")
