"""Create the workers table: each worker's queues and capabilities (GPU, TensorRT), with a heartbeat.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-30 04:30:00+00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "workers",
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("hostname", sa.String(length=255), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("queues", sa.JSON(), nullable=False),
        sa.Column("gpu_name", sa.String(length=255), nullable=True),
        sa.Column("compute_capability", sa.String(length=16), nullable=True),
        sa.Column("gpu_memory_mib", sa.Integer(), nullable=True),
        sa.Column("tensorrt_version", sa.String(length=32), nullable=True),
        sa.Column("capabilities", sa.JSON(), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("stopped_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_workers")),
    )
    op.create_index("ix_workers_expires_at", "workers", ["expires_at"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_workers_expires_at", table_name="workers")
    op.drop_table("workers")
