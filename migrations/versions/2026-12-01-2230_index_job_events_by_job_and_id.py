"""Index job_events by (job_id, id) in place of job_id alone.

GET /v1/jobs/{id}/events asks every half second per open stream for a job's events after an
id, in id order: with (job_id, id) that is one index range scan with no sort. The old index on
job_id alone is the new one's leading column, so it goes (the foreign key's cascade still has an
index to use).

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-01 22:30:00+00:00
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index("ix_job_events_job_id_id", "job_events", ["job_id", "id"], unique=False)
    op.drop_index("ix_job_events_job_id", table_name="job_events")


def downgrade() -> None:
    op.create_index("ix_job_events_job_id", "job_events", ["job_id"], unique=False)
    op.drop_index("ix_job_events_job_id_id", table_name="job_events")
