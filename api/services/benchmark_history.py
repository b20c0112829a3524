"""A model's benchmark records over time, grouped by the configuration they measured: what the
job shipped (`config_key`, worker/pipeline/records/benchmark_keys.py), so a latency is read next
to the others of the same settings and a change of machine or library shows as such.

Three queries a page, however many jobs: the configurations' count, the page of them (most
recently measured first), and every record of those configurations with its job's config.
Records from before configuration keys have none and are left out: nothing says which of them
measured the same thing.
"""

import uuid

from sqlalchemy import ColumnElement, distinct, func, select
from sqlalchemy.orm import Session

from api.schemas.benchmarks import (
    BenchmarkConfigSummary,
    BenchmarkHistory,
    BenchmarkHistoryEntry,
    ConfigurationHistory,
)
from api.services.models import get_model
from core.db.models import BenchmarkRecord, Job
from core.job_config import JobConfig
from core.shipped_configuration import named_passes, shipped_configuration, shipped_job_config
from optimizer.measure.environment import environment_differences

__all__ = ["benchmark_history"]

_ENTRY_FIELDS = [name for name in BenchmarkHistoryEntry.model_fields
                 if name not in ("job_id", "environment_differences")]


def benchmark_history(*, session: Session, project_id: uuid.UUID, model_id: uuid.UUID,
                      variant: str, suite: str, limit: int, offset: int) -> BenchmarkHistory:
    """The page of the project's model's configurations measured by `suite`'s `variant` records;
    ModelNotFound for another project's model as for an unknown one."""
    get_model(session=session, project_id=project_id, model_id=model_id)
    conditions: list[ColumnElement[bool]] = [
        Job.model_id == model_id, Job.project_id == project_id,
        BenchmarkRecord.suite == suite, BenchmarkRecord.variant == variant,
        BenchmarkRecord.config_key.is_not(None)]
    records = select(BenchmarkRecord).join(Job, Job.id == BenchmarkRecord.job_id)
    total = session.execute(
        records.with_only_columns(func.count(distinct(BenchmarkRecord.config_key)))
        .where(*conditions)).scalar_one()
    latest = func.max(BenchmarkRecord.created_at)
    keys: list[str] = [key for key in session.execute(
        records.with_only_columns(BenchmarkRecord.config_key).where(*conditions)
        .group_by(BenchmarkRecord.config_key)
        .order_by(latest.desc(), BenchmarkRecord.config_key)
        .limit(limit).offset(offset)).scalars() if key is not None]
    grouped: dict[str, list[tuple[BenchmarkRecord, Job]]] = {key: [] for key in keys}
    if keys:
        rows = session.execute(
            select(BenchmarkRecord, Job).join(Job, Job.id == BenchmarkRecord.job_id)
            .where(*conditions, BenchmarkRecord.config_key.in_(keys))
            .order_by(BenchmarkRecord.created_at.desc(), BenchmarkRecord.id.desc()))
        for record, job in rows:
            grouped[record.config_key or ""].append((record, job))
    return BenchmarkHistory(items=[_configuration(key, grouped[key]) for key in keys],
                            total=total, limit=limit, offset=offset)


def _configuration(key: str, records: list[tuple[BenchmarkRecord, Job]]) -> ConfigurationHistory:
    """The configuration as its newest job shipped it, and every record of it."""
    newest, job = records[0]
    config = shipped_job_config(JobConfig.model_validate(job.config), job.search_report)
    shipped = shipped_configuration(
        config, {"fusion_report": job.fusion_report, "accuracy_report": job.accuracy_report,
                 "search_report": job.search_report})
    summary = BenchmarkConfigSummary(
        backend=shipped["backend"], precision=shipped["precision"],
        quantization_mode=shipped["quantization_mode"], target_gpu=shipped["target_gpu"],
        passes=named_passes(config, shipped["passes"]), input_shapes=shipped["input_shapes"],
        profiles=shipped["profiles"], batch_size=newest.batch_size)
    entries = [BenchmarkHistoryEntry(
        job_id=record.job_id,
        environment_differences=(
            environment_differences(record.environment, newest.environment)
            if record.environment_key != newest.environment_key else []),
        **{name: getattr(record, name) for name in _ENTRY_FIELDS})
        for record, _ in records]
    return ConfigurationHistory(config_key=key, config=summary, entries=entries)
