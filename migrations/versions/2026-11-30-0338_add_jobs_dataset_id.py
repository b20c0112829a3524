"""Add jobs.dataset_id: the uploaded dataset a job validates on (null: seeded random inputs).

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-30 03:38:00+00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch_op:
        batch_op.add_column(sa.Column("dataset_id", sa.Uuid(), nullable=True))
        batch_op.create_foreign_key(
            op.f("fk_jobs_dataset_id_datasets"),
            "datasets",
            ["dataset_id"],
            ["id"],
            ondelete="RESTRICT",
        )


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch_op:
        batch_op.drop_constraint(op.f("fk_jobs_dataset_id_datasets"), type_="foreignkey")
        batch_op.drop_column("dataset_id")
