"""Turn Job rows into the response schemas (artifact URLs, error object, validation verdict)."""

from api.schemas.jobs import (
    ArtifactRead,
    BenchmarkRead,
    JobError,
    JobEventRead,
    JobRead,
    JobSummary,
    OutputValidationRead,
    ValidationRead,
)
from core.db.models import Job
from core.job_config import JobConfig

__all__ = ["job_read", "job_summary"]


def _error(job: Job) -> JobError | None:
    if job.error_code is None:
        return None
    return JobError(code=job.error_code, message=job.error_message or "")


def job_summary(job: Job) -> JobSummary:
    return JobSummary(
        id=job.id,
        model_id=job.model_id,
        status=job.status,
        stage=job.stage,
        progress=job.progress,
        error=_error(job),
        # The detail explains a wait; once a worker claims the job it no longer applies.
        status_detail=job.status_detail,
        created_at=job.created_at,
        started_at=job.started_at,
        finished_at=job.finished_at,
    )


def _benchmarks(job: Job) -> list[BenchmarkRead]:
    records = [BenchmarkRead.model_validate(b) for b in job.benchmarks]
    ablation = [r for r in records if r.suite == "ablation"]
    for previous, current in zip(ablation, ablation[1:], strict=False):
        # Each stage adds fusions to the previous one; a slower stage is reported as such.
        current.slower_than_previous = current.latency_ms_p50 > previous.latency_ms_p50
    return records


def job_read(job: Job) -> JobRead:
    outputs = [
        OutputValidationRead(
            name=r.output_name,
            samples=r.samples,
            max_abs_err=r.max_abs_err,
            max_rel_err=r.max_rel_err,
            mean_abs_err=r.mean_abs_err,
            cosine_similarity=r.cosine_similarity,
            atol=r.atol,
            rtol=r.rtol,
            min_cosine=r.min_cosine,
            passed=r.passed,
            metrics=r.metrics,
        )
        for r in job.validation_results
    ]
    validation = ValidationRead(passed=all(o.passed for o in outputs), outputs=outputs) if outputs else None
    return JobRead(
        **job_summary(job).model_dump(),
        config=JobConfig.model_validate(job.config),
        worker=job.worker,
        attempts=job.attempts,
        artifacts=[
            ArtifactRead(
                name=a.name,
                kind=a.kind,
                size_bytes=a.size_bytes,
                sha256=a.sha256,
                url=f"/v1/jobs/{job.id}/artifacts/{a.name}",
            )
            for a in job.artifacts
        ],
        accuracy_report=job.accuracy_report,
        engine_report=job.engine_report,
        fusion_report=job.fusion_report,  # type: ignore[arg-type]  # validated into the schema
        validation=validation,
        benchmarks=_benchmarks(job),
        events=[JobEventRead.model_validate(e) for e in job.events],
    )
