"""Add datasets.role (existing rows validate) and the calibrations table: the activation ranges
a calibration computed, once per model, dataset, method and graph.

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-03 10:00:00+00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0021"
down_revision: str | None = "0020"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


# Plain ALTER TABLE, no batch: a batch rebuild of `datasets` on SQLite would drop a table that
# jobs reference (see 0019). SQLite adds a column with a constant default and (3.35+) drops one
# in place.
def upgrade() -> None:
    op.add_column("datasets", sa.Column("role", sa.String(length=16), nullable=False,
                                        server_default="validation"))
    op.create_table(
        "calibrations",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("project_id", sa.Uuid(), nullable=False),
        sa.Column("model_id", sa.Uuid(), nullable=False),
        sa.Column("dataset_id", sa.Uuid(), nullable=False),
        sa.Column("method", sa.String(length=16), nullable=False),
        sa.Column("graph_sha256", sa.String(length=64), nullable=False),
        sa.Column("storage_uri", sa.Text(), nullable=False),
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.Column("size_bytes", sa.BigInteger(), nullable=False),
        sa.Column("samples", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["project_id"], ["projects.id"],
                                name=op.f("fk_calibrations_project_id_projects"),
                                ondelete="RESTRICT"),
        sa.ForeignKeyConstraint(["model_id"], ["models.id"],
                                name=op.f("fk_calibrations_model_id_models"), ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["dataset_id"], ["datasets.id"],
                                name=op.f("fk_calibrations_dataset_id_datasets"),
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_calibrations")),
        sa.UniqueConstraint("model_id", "dataset_id", "method", "graph_sha256", "samples",
                            name="uq_calibrations_model_id_dataset_id_method_graph_sha256_samples"),
    )
    op.create_index(op.f("ix_calibrations_project_id"), "calibrations", ["project_id"],
                    unique=False)
    op.create_index(op.f("ix_calibrations_dataset_id"), "calibrations", ["dataset_id"],
                    unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_calibrations_dataset_id"), table_name="calibrations")
    op.drop_index(op.f("ix_calibrations_project_id"), table_name="calibrations")
    op.drop_table("calibrations")
    op.drop_column("datasets", "role")
