"""Jobs for the dashboard's page tests, stored as the worker stores them, from real documents.

fixtures/job_documents.json holds what GET /v1/jobs/{id} answered for jobs a FuseForge run
finished on a small CNN (optimizer.testing.models.small_cnn), except where said:
"onnxruntime_ablation" (fp32 with `"ablation": true`), "failed_localised" (impossible
tolerances: the accuracy report's bisection, blame and localization), "fallback",
"fp16_search" (`precision_search`), "tensorrt_ablation" (the pipeline's FakeTensorRT,
tests/support/fake_tensorrt.py: engine metadata and the inspector's layer summary), and
"search" (`"search": {"time_budget_s": 120}` on a small conv stack, as
tests/worker/pipeline/test_search_jobs.py runs it: the search_report's race, the winner, its
recipe and the refused int8-static). "near_miss_fusion_report" is
`optimize_model(conv_bn(share_weights=True))`'s report (tests/optimizer/passes/
test_fold_batch_norm.py): a FoldBatchNormIntoConv match its check refused.

`insert_job` writes one of them as rows (job, artifacts, validation, benchmarks, events) under
a new id, so the page reads it back through the real API.
"""

import copy
import hashlib
import json
import uuid
from datetime import datetime
from functools import cache
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session

from core.db.models import Artifact, BenchmarkRecord, Job, JobEvent, Model, ValidationResult

__all__ = ["document", "insert_job", "insert_model"]

_FIXTURES = Path(__file__).parent / "fixtures" / "job_documents.json"


@cache
def _documents() -> dict[str, Any]:
    return json.loads(_FIXTURES.read_text())  # type: ignore[no-any-return]


def document(name: str) -> dict[str, Any]:
    """A copy of the stored document `name`, to change freely."""
    return copy.deepcopy(_documents()[name])


def insert_model(session: Session, project_id: uuid.UUID, name: str = "cnn.onnx") -> uuid.UUID:
    model = Model(project_id=project_id, name=name, sha256=hashlib.sha256(name.encode()).hexdigest(),
                  size_bytes=4740,
                  storage_uri=f"store://models/{uuid.uuid4()}.onnx", ir_version=10, opset=17,
                  producer="pytorch 2.5.1",
                  inputs=[{"name": "input", "dtype": "float32", "shape": ["N", 3, 32, 32]}],
                  outputs=[{"name": "logits", "dtype": "float32", "shape": ["N", 10]}])
    session.add(model)
    session.commit()
    return model.id


def insert_job(session: Session, project_id: uuid.UUID, model_id: uuid.UUID,
               doc: dict[str, Any] | str, **changes: Any) -> str:
    """Store `doc` (a document or its fixture name) with `changes` to its fields as a new job
    of `model_id`; its id."""
    doc = document(doc) if isinstance(doc, str) else doc
    doc.update(changes)
    error = doc.get("error") or {}
    job = Job(project_id=project_id, model_id=model_id, config=doc["config"],
              status=doc["status"], stage=doc["stage"], progress=doc["progress"],
              error_code=error.get("code"), error_message=error.get("message"),
              status_detail=doc.get("status_detail"), worker=doc.get("worker"),
              attempts=doc.get("attempts", 0), created_at=_at(doc["created_at"]),
              started_at=_at(doc.get("started_at")), finished_at=_at(doc.get("finished_at")),
              fusion_report=doc.get("fusion_report"), accuracy_report=doc.get("accuracy_report"),
              engine_report=doc.get("engine_report"), profile_report=doc.get("profile_report"),
              search_report=doc.get("search_report"), stage_memory=doc.get("stage_memory"),
              outcome=doc.get("outcome"))
    session.add(job)
    session.flush()
    for artifact in doc.get("artifacts", []):
        session.add(Artifact(job_id=job.id, name=artifact["name"], kind=artifact["kind"],
                             uri=f"store://jobs/{job.id}/{artifact['name']}",
                             sha256=artifact["sha256"], size_bytes=artifact["size_bytes"],
                             expired_at=_at(artifact.get("expired_at"))))
    for output in (doc.get("validation") or {}).get("outputs", []):
        session.add(ValidationResult(
            job_id=job.id, output_name=output["name"],
            **{k: output[k] for k in ("samples", "max_abs_err", "max_rel_err", "mean_abs_err",
                                      "cosine_similarity", "atol", "rtol", "min_cosine",
                                      "passed", "metrics")}))
    for bench in doc.get("benchmarks", []):  # the API works out slower_than_previous
        session.add(BenchmarkRecord(job_id=job.id, **{
            k: v for k, v in bench.items() if k != "slower_than_previous"}))
    for event in doc.get("events", []):
        session.add(JobEvent(job_id=job.id, stage=event["stage"], message=event["message"],
                             created_at=_at(event["created_at"])))
    session.commit()
    return str(job.id)


def _at(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value) if value else None
