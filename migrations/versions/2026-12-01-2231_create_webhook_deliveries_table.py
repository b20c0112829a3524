"""Create the webhook_deliveries table: each attempt to POST a job's webhook, as it went.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-01 22:30:00+00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "webhook_deliveries",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("job_id", sa.Uuid(), nullable=False),
        sa.Column("delivery_id", sa.Uuid(), nullable=False),
        sa.Column("event", sa.String(length=32), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("url", sa.Text(), nullable=False),
        sa.Column("status_code", sa.Integer(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("duration_ms", sa.Float(), nullable=False),
        sa.Column("final", sa.Boolean(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"],
                                name=op.f("fk_webhook_deliveries_job_id_jobs"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_webhook_deliveries")),
        sa.UniqueConstraint("job_id", "attempt", name="uq_webhook_deliveries_job_id_attempt"),
    )
    op.create_index(op.f("ix_webhook_deliveries_job_id"), "webhook_deliveries", ["job_id"],
                    unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_webhook_deliveries_job_id"), table_name="webhook_deliveries")
    op.drop_table("webhook_deliveries")
