"""The configuration key of a benchmark record: a digest of the job settings that make two
records the same measurement, so a record's history compares like with like.

Two records share a key when they timed the same variant of the same suite at the same batch,
of engines built alike: backend, precision (and whether its fp32 islands were searched), target
GPU, the passes as `select_passes` resolves them (so "all" and the list it stands for are one
configuration, and a change to the defaults starts a new one), input shapes and profiles, and
the ONNX Runtime options that change its speed. Tolerances, the webhook, the dataset and the
validation options change what is checked, not what is timed, and are left out; the machine is
the environment key's business.
"""

import hashlib
import json
import uuid
from collections.abc import Iterable
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from core.db.models import BenchmarkRecord, Job
from core.job_config import JobConfig
from optimizer.optimize import OptimizeOptions, select_passes

__all__ = ["KEY_HEX_DIGITS", "config_key", "measured_configuration", "set_config_keys"]

KEY_HEX_DIGITS = 16


def measured_configuration(config: JobConfig) -> dict[str, Any]:
    """The job settings that shape what its benchmarks time, as plain JSON values."""
    passes, _ = select_passes(OptimizeOptions(backend=config.backend, passes=config.passes))
    return {
        "backend": config.backend,
        "precision": config.precision,
        "precision_search": config.precision_search,
        "target_gpu": config.target_gpu,
        "passes": [p.name for p in passes],
        "input_shapes": config.input_shapes,
        "profiles": config.profile_shapes(),
        "ort_optimization_level": config.ort_optimization_level,
        "ort_flush_denormals": config.ort_flush_denormals,
    }


def config_key(config: JobConfig, *, suite: str, variant: str, batch_size: int) -> str:
    """The 16-hex digest of `config`'s measured settings and the record's suite, variant and
    batch."""
    document = {**measured_configuration(config), "suite": suite, "variant": variant,
                "batch_size": batch_size}
    text = json.dumps(document, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:KEY_HEX_DIGITS]


def set_config_keys(session: Session, job_id: uuid.UUID,
                    records: Iterable[BenchmarkRecord]) -> None:
    """Give each of the job's new records its configuration key, from the job's stored config."""
    stored = session.execute(select(Job.config).where(Job.id == job_id)).scalar_one()
    config = JobConfig.model_validate(stored)
    for record in records:
        record.config_key = config_key(config, suite=record.suite, variant=record.variant,
                                       batch_size=record.batch_size)
