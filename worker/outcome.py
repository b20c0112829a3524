"""Record how a job ended: artifacts and records commit together with `succeeded`, or a failure."""

import logging

from api.db import job_state
from sqlalchemy import update
from sqlalchemy.orm import Session

from api.db.models import Artifact, BenchmarkRecord, Job, ValidationResult
from api.db.session import session_scope
from api.storage import ArtifactStore, StoredObject
from optimizer.jsonable import json_safe
from worker.context import JobContext

__all__ = ["record_failure", "record_success"]

logger = logging.getLogger(__name__)


def _validation_rows(ctx: JobContext) -> list[ValidationResult]:
    report = ctx.validation
    if report is None:
        return []
    rows = []
    for output in report.outputs:
        metrics = output.to_dict()  # non-finite errors become None: JSON and SQLite lack NaN
        rows.append(
            ValidationResult(
                job_id=ctx.job_id,
                output_name=output.name,
                samples=report.samples,
                max_abs_err=metrics["max_abs_err"],
                max_rel_err=metrics["max_rel_err"],
                mean_abs_err=metrics["mean_abs_err"],
                cosine_similarity=metrics["cosine_similarity"],
                atol=report.tolerances.atol,
                rtol=report.tolerances.rtol,
                min_cosine=report.tolerances.min_cosine,
                passed=output.passed,
                metrics=metrics,
            )
        )
    return rows


def _benchmark_rows(ctx: JobContext) -> list[BenchmarkRecord]:
    return [
        BenchmarkRecord(job_id=ctx.job_id, suite=suite, **result.to_dict())
        for suite, results in (("comparison", ctx.benchmarks), ("ablation", ctx.ablation))
        for result in results
    ]


def _attach_reports(session: Session, ctx: JobContext) -> None:
    accuracy = dict(ctx.accuracy)
    if ctx.validation is not None:
        accuracy["tolerances"] = ctx.validation.tolerances.to_dict()
        accuracy["failures"] = [f.to_dict() for f in ctx.validation.failures]
    values = {"accuracy_report": json_safe(accuracy) if accuracy else None}
    if ctx.fusion_report is not None:
        values["fusion_report"] = ctx.fusion_report.to_dict()
    if ctx.engine_report is not None:
        values["engine_report"] = json_safe(ctx.engine_report)
    session.execute(update(Job).where(Job.id == ctx.job_id).values(**values))


def record_success(ctx: JobContext, store: ArtifactStore) -> bool:
    """Store the artifacts, then commit their rows, the records and `succeeded` in one transaction.

    Returns False (and removes the stored files) if the job was cancelled meanwhile.
    """
    stored: list[tuple[str, str, StoredObject]] = []
    try:
        for artifact in ctx.artifacts.values():
            key = f"jobs/{ctx.job_id}/{artifact.name}"
            stored.append((artifact.name, artifact.kind, store.put_file(artifact.path, key)))
        with session_scope() as session:
            session.add_all(
                Artifact(
                    job_id=ctx.job_id,
                    name=name,
                    kind=kind,
                    uri=obj.uri,
                    sha256=obj.sha256,
                    size_bytes=obj.size_bytes,
                )
                for name, kind, obj in stored
            )
            session.add_all(_validation_rows(ctx))
            session.add_all(_benchmark_rows(ctx))
            _attach_reports(session, ctx)
            if job_state.succeed(session, ctx.job_id) is None:
                session.rollback()
                _delete_quietly(store, stored)
                return False
        return True
    except BaseException:
        _delete_quietly(store, stored)
        raise


def record_failure(ctx: JobContext, code: str, message: str) -> None:
    """Mark the job failed; validation rows stay with it, since they explain an accuracy failure."""
    with session_scope() as session:
        if job_state.fail(session, ctx.job_id, code, message) is not None:
            session.add_all(_validation_rows(ctx))
            _attach_reports(session, ctx)


def _delete_quietly(store: ArtifactStore, stored: list[tuple[str, str, StoredObject]]) -> None:
    for _, _, obj in stored:
        try:
            store.delete(obj.uri)
        except OSError:
            logger.exception("could not delete artifact %s of a job that did not succeed", obj.uri)
