"""Add to benchmark_records what makes a record comparable: the speed-up's confidence interval
and verdict, the median latency's interval, the per-round latencies, the warm-up's stability,
the environment it was measured in, the configuration it belongs to, the memory traffic
context, and a regression flag.

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-02 12:00:00+00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0020"
down_revision: str | None = "0019"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_FLOATS = ("speedup_ci_low", "speedup_ci_high", "latency_ms_p50_ci_low", "latency_ms_p50_ci_high",
           "warmup_cv", "bytes_per_inference", "achieved_gb_s", "bandwidth_fraction")


def upgrade() -> None:
    with op.batch_alter_table("benchmark_records") as batch_op:
        for name in _FLOATS:
            batch_op.add_column(sa.Column(name, sa.Float(), nullable=True))
        batch_op.add_column(sa.Column("speedup_verdict", sa.String(32), nullable=True))
        batch_op.add_column(sa.Column("warmup_stable", sa.Boolean(), nullable=True))
        batch_op.add_column(sa.Column("latencies_ms", sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column("environment", sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column("environment_key", sa.String(64), nullable=True))
        batch_op.add_column(sa.Column("config_key", sa.String(64), nullable=True))
        batch_op.add_column(sa.Column("regression", sa.JSON(), nullable=True))
        batch_op.create_index("ix_benchmark_records_config_key", ["config_key"])


def downgrade() -> None:
    with op.batch_alter_table("benchmark_records") as batch_op:
        batch_op.drop_index("ix_benchmark_records_config_key")
        for name in ("regression", "config_key", "environment_key", "environment", "latencies_ms",
                     "warmup_stable", "speedup_verdict", *reversed(_FLOATS)):
            batch_op.drop_column(name)
