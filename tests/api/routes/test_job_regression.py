"""A job shows its engine record's regression (null when none was flagged), in GET /v1/jobs/{id}
and in the job list alike."""

from __future__ import annotations

import uuid

from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from core.db.models import BenchmarkRecord
from optimizer.testing.models import model_bytes, small_cnn

REGRESSION = {"against_job": str(uuid.uuid4()), "against_latency_ms_p50": 2.4,
              "against_ci": [2.35, 2.46], "latency_ms_p50": 3.1, "ci": [2.98, 3.22],
              "slowdown": 1.29, "detail": "engine p50 3.10 ms (2.98–3.22) vs 2.40 ms: 1.29× slower"}


def _record(job_id: str, variant: str, regression: dict[str, object] | None) -> BenchmarkRecord:
    return BenchmarkRecord(job_id=uuid.UUID(job_id), suite="comparison", variant=variant,
                           backend="onnxruntime", batch_size=1, iterations=30, warmup=5,
                           latency_ms_p50=3.1, latency_ms_p90=3.2, latency_ms_p99=3.3,
                           latency_ms_mean=3.1, throughput_per_s=322.0,
                           speedup_vs_reference=None if variant == "original" else 1.5,
                           regression=regression)


def test_job_and_list_show_the_engines_regression(client: TestClient, db_session: Session) -> None:
    model = client.post("/v1/models", files={"file": ("m.onnx", model_bytes(small_cnn()))})
    model_id = model.json()["id"]
    slow, fine = (client.post("/v1/jobs", json={"model_id": model_id}).json()["id"]
                  for _ in range(2))
    db_session.add_all([_record(slow, "original", None), _record(slow, "engine", REGRESSION),
                        _record(fine, "engine", None)])
    db_session.commit()

    assert client.get(f"/v1/jobs/{slow}").json()["regression"] == REGRESSION
    assert client.get(f"/v1/jobs/{fine}").json()["regression"] is None
    listed = {j["id"]: j["regression"] for j in client.get("/v1/jobs").json()["items"]}
    assert listed == {slow: REGRESSION, fine: None}
