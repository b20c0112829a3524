"""A database with what a busy FuseForge holds: finished jobs with their events, validation and
benchmark records and artifacts, for the read benchmarks to fetch."""

from __future__ import annotations

import uuid
from datetime import timedelta

from sqlalchemy.orm import Session

from core.db.models import (
    DEFAULT_PROJECT_ID,
    Artifact,
    BenchmarkRecord,
    BenchmarkSuite,
    BenchmarkVariant,
    Job,
    JobEvent,
    JobStatus,
    Model,
    ValidationResult,
)
from core.db.session import make_engine
from core.db.types import utc_now
from core.job_config import JobConfig

__all__ = ["seed_jobs"]

_STAGES = ("load", "optimize", "build_engine", "validate", "benchmark", "store")


def seed_jobs(database_url: str, count: int = 60) -> list[uuid.UUID]:
    """`count` succeeded jobs of one model, each as a real job leaves them; their ids."""
    engine = make_engine(database_url)
    now = utc_now()
    ids = []
    with Session(engine, expire_on_commit=False) as session, session.begin():
        model = Model(project_id=DEFAULT_PROJECT_ID, name="resnet.onnx",
                      sha256=uuid.uuid4().hex * 2, size_bytes=102_000_000,
                      storage_uri="store://models/x", ir_version=8, opset=17,
                      producer="pytorch", inputs=[{"name": "input", "dtype": "float32",
                                                   "shape": [1, 3, 224, 224]}],
                      outputs=[{"name": "logits", "dtype": "float32", "shape": [1, 1000]}])
        session.add(model)
        for index in range(count):
            config = JobConfig(input_shapes={"input": [1, 3, 224, 224]})
            job = Job(project_id=DEFAULT_PROJECT_ID, model=model, config=config.model_dump(mode="json"),
                      status=JobStatus.SUCCEEDED.value, stage="done", progress=1.0,
                      worker="bench:1", attempts=1, created_at=now - timedelta(minutes=index),
                      started_at=now, finished_at=now, heartbeat_at=now,
                      fusion_report=None, accuracy_report={"passed_first_time": True})
            session.add(job)
            session.flush()
            events = ["queued", "claimed by worker bench:1",
                      *(f"stage {s} started" for s in _STAGES), "succeeded"]
            session.add_all(JobEvent(job_id=job.id, message=m, stage=None) for m in events)
            session.add(ValidationResult(
                job_id=job.id, output_name="logits", samples=8, max_abs_err=1e-6,
                max_rel_err=1e-5, mean_abs_err=1e-7, cosine_similarity=1.0, atol=1e-4,
                rtol=1e-3, min_cosine=0.999, passed=True, metrics={"rmse": 1e-7}))
            session.add_all(BenchmarkRecord(
                job_id=job.id, suite=BenchmarkSuite.COMPARISON, variant=variant,
                backend="onnxruntime", batch_size=1, iterations=30, warmup=5,
                latency_ms_p50=12.0, latency_ms_p90=13.0, latency_ms_p99=15.0,
                latency_ms_mean=12.5, throughput_per_s=80.0, peak_memory_mb=300.0,
                speedup_vs_reference=None if variant == BenchmarkVariant.ORIGINAL else 1.2)
                for variant in (BenchmarkVariant.ORIGINAL, BenchmarkVariant.ENGINE))
            session.add_all(Artifact(job_id=job.id, name=name, kind="engine",
                                     uri=f"store://jobs/{job.id}/{name}", sha256="0" * 64,
                                     size_bytes=1000)
                            for name in ("engine.onnx", "manifest.json", "fused.onnx",
                                         "fusion_report.json"))
            ids.append(job.id)
    engine.dispose()
    return ids
