"""Create resumable_uploads: model uploads sent in pieces (tus 1.0), resumed after a lost
connection or an API restart.

Revision ID: 0027
Revises: 0026
Create Date: 2026-12-07 11:00:00+00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0027"
down_revision: str | None = "0026"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "resumable_uploads",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("project_id", sa.Uuid(), nullable=False),
        sa.Column("filename", sa.String(length=255), nullable=True),
        sa.Column("length", sa.BigInteger(), nullable=False),
        sa.Column("offset", sa.BigInteger(), nullable=False),
        sa.Column("pieces", sa.Integer(), nullable=False),
        sa.Column("model_sha256", sa.String(length=64), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["project_id"], ["projects.id"],
                                name=op.f("fk_resumable_uploads_project_id_projects"),
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_resumable_uploads")),
    )
    op.create_index("ix_resumable_uploads_project_id", "resumable_uploads", ["project_id"],
                    unique=False)
    op.create_index("ix_resumable_uploads_expires_at", "resumable_uploads", ["expires_at"],
                    unique=False)


def downgrade() -> None:
    op.drop_index("ix_resumable_uploads_expires_at", table_name="resumable_uploads")
    op.drop_index("ix_resumable_uploads_project_id", table_name="resumable_uploads")
    op.drop_table("resumable_uploads")
