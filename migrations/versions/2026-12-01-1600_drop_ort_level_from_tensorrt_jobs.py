"""TensorRT jobs store no `ort_optimization_level`: it applies to ONNX Runtime engines only.

Before, every stored job config carried the field (its default "all", even on a TensorRT job,
where it meant nothing); `core.job_config.JobConfig` now refuses it on a TensorRT job, so the
stored configs of earlier TensorRT jobs drop it (null) to stay readable.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-01 16:00:00+00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_JOBS = sa.table("jobs", sa.column("id", sa.Uuid), sa.column("config", sa.JSON))


def _set_tensorrt_ort_level(level: str | None) -> None:
    connection = op.get_bind()
    for job_id, config in connection.execute(sa.select(_JOBS.c.id, _JOBS.c.config)).all():
        if config.get("backend") != "tensorrt" or config.get("ort_optimization_level") == level:
            continue
        changed = {**config, "ort_optimization_level": level}
        connection.execute(_JOBS.update().where(_JOBS.c.id == job_id).values(config=changed))


def upgrade() -> None:
    _set_tensorrt_ort_level(None)


def downgrade() -> None:
    _set_tensorrt_ort_level("all")
