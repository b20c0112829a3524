"""Turn a job's outcome into database rows and columns, and store its artifacts before they are
committed: files first, then their rows together with `succeeded` (STYLE §5)."""

import logging
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from core.db.models import (
    BenchmarkRecord,
    BenchmarkSuite,
    BenchmarkVariant,
    JobStatus,
    ValidationResult,
)
from core.outcome import job_outcome
from core.storage import ArtifactStore, ArtifactStoreUnavailable, StoredObject
from worker.pipeline.results import JobOutcome

__all__ = [
    "StoredArtifacts", "benchmark_rows", "failed_outcome_column", "outcome_column",
    "report_columns", "store_artifacts_then", "validation_rows",
]

logger = logging.getLogger(__name__)

StoredArtifacts = Sequence[tuple[str, str, StoredObject]]  # (name, kind, stored object)


def validation_rows(job_id: uuid.UUID, outcome: JobOutcome) -> list[ValidationResult]:
    report = outcome.validation
    if report is None:
        return []
    rows = []
    for output in report.outputs:
        metrics = output.to_dict()  # non-finite errors become None: JSON and SQLite lack NaN
        rows.append(
            ValidationResult(
                job_id=job_id,
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


def benchmark_rows(job_id: uuid.UUID, outcome: JobOutcome) -> list[BenchmarkRecord]:
    return [
        BenchmarkRecord(job_id=job_id, suite=suite, **result.to_dict())
        for suite, results in ((BenchmarkSuite.COMPARISON, outcome.benchmarks),
                               (BenchmarkSuite.ABLATION, outcome.ablation),
                               (BenchmarkSuite.SWEEP, outcome.sweep))
        for result in results
    ]


def report_columns(outcome: JobOutcome) -> dict[str, Any]:
    """The job's report columns (`core.reports.JobReports`), as strict JSON: the accuracy
    report also gets the verdict's tolerances and failures."""
    reports = outcome.reports.model_copy(deep=True)
    if (report := outcome.validation) is not None:
        accuracy = reports.accuracy()
        accuracy.tolerances = report.tolerances.to_dict()
        accuracy.failures = [f.to_dict() for f in report.failures]
        # What the verdict was reached on: the input shapes and the ranges of random inputs.
        accuracy.input_shapes = [check.to_dict() for check in report.shapes]
        accuracy.input_ranges = {name: spec.to_dict() for name, spec in report.input_ranges.items()}
    return reports.columns()


def outcome_column(config: dict[str, Any], outcome: JobOutcome,
                   columns: dict[str, Any]) -> dict[str, Any]:
    """The `jobs.outcome` of a job that succeeded with `outcome` (`core.outcome.Outcome` as
    JSON): `columns` are its `report_columns`, `config` the job's config as stored."""
    engine = [result.to_dict() for result in outcome.benchmarks
              if result.variant == BenchmarkVariant.ENGINE]
    validation = None if outcome.validation is None else outcome.validation.to_dict()
    return job_outcome(config=config, status=JobStatus.SUCCEEDED.value, reports=columns,
                       engine_record=engine[-1] if engine else None, validation=validation,
                       original_shipped=outcome.original_shipped,
                       original_backend=outcome.original_backend).model_dump(mode="json")


def failed_outcome_column(config: dict[str, Any], code: str, message: str,
                          outcome: JobOutcome) -> dict[str, Any]:
    """The `jobs.outcome` of a job that failed with `code` and `message` after `outcome`'s
    validation: nothing shipped, and the verdict with its worst metric."""
    return job_outcome(config=config, status=JobStatus.FAILED.value, error=(code, message),
                       reports=report_columns(outcome),
                       validation=None if outcome.validation is None
                       else outcome.validation.to_dict()).model_dump(mode="json")


def attempt_prefix(job_id: uuid.UUID, attempt: int) -> str:
    """The store folder of one attempt's artifacts: each claim of a job stores apart, so a
    worker lost and replaced can never overwrite or remove the files of the attempt that
    replaced it."""
    return f"jobs/{job_id}/{attempt}/"


def store_artifacts_then(job_id: uuid.UUID, attempt: int, outcome: JobOutcome,
                         store: ArtifactStore, commit: Callable[[StoredArtifacts], bool]) -> bool:
    """Put every artifact in `store` (under the attempt's folder), then `commit` their rows; the
    stored files are removed again if the commit says no (the job was cancelled, or taken over,
    meanwhile) or fails."""
    stored: list[tuple[str, str, StoredObject]] = []
    try:
        for artifact in outcome.artifacts.values():
            key = attempt_prefix(job_id, attempt) + artifact.name
            stored.append((artifact.name, artifact.kind, store.put_file(artifact.path, key)))
        if commit(stored):
            return True
    except BaseException:
        _delete_quietly(store, stored)
        raise
    _delete_quietly(store, stored)
    return False


def _delete_quietly(store: ArtifactStore, stored: StoredArtifacts) -> None:
    for _, _, obj in stored:
        try:
            store.delete(obj.uri)
        except (OSError, ArtifactStoreUnavailable):  # the janitor removes it later
            logger.exception("could not delete artifact %s of a job that did not succeed", obj.uri)
