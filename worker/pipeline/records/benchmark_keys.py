"""The configuration key of a benchmark record: a digest of the settings of what the job
SHIPPED that make two records the same measurement, so a record's history compares like with
like.

Two records share a key when they timed the same variant of the same suite at the same batch,
of engines that shipped alike (core/shipped_configuration.py): backend, the precision that
shipped (an int8 job that shipped fp32 is an fp32 configuration, whatever it asked) and its
quantization mode, whether fp32 islands were searched, target GPU, the passes that ran (so "all"
and the list it stands for are one configuration, and a change to the defaults starts a new
one) and the rules kept off, input shapes and profiles, and the ONNX Runtime options that change
its speed. Tolerances, the webhook, the dataset and the validation options change what is
checked, not what is timed, and are left out; the machine is the environment key's business.
"""

import hashlib
import json
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from core.db.models import BenchmarkRecord, Job
from core.job_config import JobConfig
from core.shipped_configuration import shipped_configuration

__all__ = ["KEY_HEX_DIGITS", "config_key", "set_config_keys"]

KEY_HEX_DIGITS = 16


def config_key(config: JobConfig, *, suite: str, variant: str, batch_size: int,
               reports: Mapping[str, Any | None] | None = None) -> str:
    """The 16-hex digest of what `config`'s job shipped (its `reports` say what the run decided;
    None: as asked) and the record's suite, variant and batch."""
    document = {**shipped_configuration(config, reports or {}), "suite": suite,
                "variant": variant, "batch_size": batch_size}
    text = json.dumps(document, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:KEY_HEX_DIGITS]


def set_config_keys(session: Session, job_id: uuid.UUID, records: Iterable[BenchmarkRecord],
                    reports: Mapping[str, Any | None]) -> None:
    """Give each of the job's new records its configuration key, from the job's stored config
    and its run's `reports` (its report columns, as they are about to be stored)."""
    stored = session.execute(select(Job.config).where(Job.id == job_id)).scalar_one()
    config = JobConfig.model_validate(stored)
    for record in records:
        record.config_key = config_key(config, suite=record.suite, variant=record.variant,
                                       batch_size=record.batch_size, reports=reports)
