"""Add jobs.search_report (a search job's decision and Pareto table) and the search_candidates
table: each candidate of a search as soon as it is judged, what a resumed search reads.

Revision ID: 0023
Revises: 0022
Create Date: 2026-12-04 18:00:00+00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0023"
down_revision: str | None = "0022"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch_op:
        batch_op.add_column(sa.Column("search_report", sa.JSON(), nullable=True))
    op.create_table(
        "search_candidates",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("job_id", sa.Uuid(), nullable=False),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("outcome", sa.String(length=32), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("recipe", sa.JSON(), nullable=False),
        sa.Column("accuracy", sa.JSON(), nullable=True),
        sa.Column("engine_bytes", sa.BigInteger(), nullable=True),
        sa.Column("build_s", sa.Float(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"],
                                name=op.f("fk_search_candidates_job_id_jobs"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_search_candidates")),
        sa.UniqueConstraint("job_id", "name", name="uq_search_candidates_job_id_name"),
    )


def downgrade() -> None:
    op.drop_table("search_candidates")
    with op.batch_alter_table("jobs") as batch_op:
        batch_op.drop_column("search_report")
