"""Create the datasets table: uploaded .npz validation inputs, stored once per content hash.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30 03:37:00+00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "datasets",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.Column("size_bytes", sa.BigInteger(), nullable=False),
        sa.Column("storage_uri", sa.Text(), nullable=False),
        sa.Column("samples", sa.Integer(), nullable=False),
        sa.Column("arrays", sa.JSON(), nullable=False),
        sa.Column("has_labels", sa.Boolean(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_datasets")),
        sa.UniqueConstraint("sha256", name=op.f("uq_datasets_sha256")),
    )
    op.create_index("ix_datasets_created_at", "datasets", ["created_at"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_datasets_created_at", table_name="datasets")
    op.drop_table("datasets")
