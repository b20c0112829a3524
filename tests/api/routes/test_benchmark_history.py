"""GET /v1/models/{id}/benchmarks: a model's records over time, grouped by configuration, newest
configuration first, each entry saying where its environment differs from the latest's."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import event
from sqlalchemy.orm import Session

from core.db.models import BenchmarkRecord, Job
from core.db.types import utc_now
from core.settings import Settings
from optimizer.testing.models import model_bytes, small_cnn
from tests.support.api_keys import bearer, new_key

ENV = {"cpu": "EPYC", "cpu_cores": 2, "threads": 1, "onnxruntime": "1.23.2", "worker": "a:1",
       "memory_bandwidth_gb_s": 11.8}


@pytest.fixture
def model_id(client: TestClient) -> str:
    response = client.post("/v1/models", files={"file": ("cnn.onnx", model_bytes(small_cnn()))})
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def _job(client: TestClient, model_id: str, **config: Any) -> uuid.UUID:
    response = client.post("/v1/jobs", json={"model_id": model_id, **config})
    assert response.status_code == 202, response.text
    return uuid.UUID(response.json()["id"])


def _record(session: Session, job_id: uuid.UUID, *, key: str, hours_ago: float, p50: float,
            variant: str = "engine", suite: str = "comparison",
            environment: dict[str, Any] | None = None,
            regression: dict[str, Any] | None = None) -> None:
    environment = environment or ENV
    session.add(BenchmarkRecord(
        job_id=job_id, suite=suite, variant=variant, backend="onnxruntime", batch_size=1,
        iterations=30, warmup=5, latency_ms_p50=p50, latency_ms_p90=p50, latency_ms_p99=p50,
        latency_ms_mean=p50, throughput_per_s=1000 / p50, speedup_vs_reference=2.0,
        speedup_ci_low=1.9, speedup_ci_high=2.1, speedup_verdict="faster",
        latency_ms_p50_ci_low=p50 * 0.98, latency_ms_p50_ci_high=p50 * 1.02, config_key=key,
        environment=environment, environment_key=f"env-{environment['onnxruntime']}",
        regression=regression, created_at=utc_now() - timedelta(hours=hours_ago)))
    session.commit()


def test_records_are_grouped_by_configuration_newest_first(client: TestClient, db_session: Session,
                                                           model_id: str) -> None:
    fp32 = [_job(client, model_id) for _ in range(3)]
    fp16 = _job(client, model_id, precision="fp16")
    flagged = {"detail": "engine p50 3.10 ms (3.04–3.16) vs 2.00 ms (1.96–2.04) in job x: 1.55× slower"}
    _record(db_session, fp32[0], key="a" * 16, hours_ago=30, p50=2.5,
            environment={**ENV, "onnxruntime": "1.22.0", "worker": "b:2"})
    _record(db_session, fp32[1], key="a" * 16, hours_ago=20, p50=2.0)
    _record(db_session, fp32[2], key="a" * 16, hours_ago=1, p50=3.1, regression=flagged)
    _record(db_session, fp16, key="b" * 16, hours_ago=5, p50=1.0)
    _record(db_session, fp32[2], key="c" * 16, hours_ago=1, p50=9.0, variant="original")

    body = client.get(f"/v1/models/{model_id}/benchmarks").json()
    assert body["total"] == 2
    first, second = body["items"]
    assert first["config_key"] == "a" * 16 and second["config_key"] == "b" * 16
    assert first["config"] == {"backend": "onnxruntime", "precision": "fp32",
                               "quantization_mode": None, "target_gpu": None,
                               "passes": "all", "input_shapes": {"input": [1, 3, 32, 32]},
                               "profiles": None, "batch_size": 1}
    assert second["config"]["precision"] == "fp16"
    entries = first["entries"]
    assert [e["job_id"] for e in entries] == [str(j) for j in reversed(fp32)]
    assert entries[0]["regression"] == flagged and entries[1]["regression"] is None
    assert entries[0]["latency_ms_p50_ci_low"] == pytest.approx(3.1 * 0.98)
    assert entries[0]["speedup_verdict"] == "faster"
    # the worker and the measured bandwidth differ too, but do not make environments differ
    assert [e["environment_differences"] for e in entries] == [
        [], [], ["onnxruntime 1.22.0 vs 1.23.2"]]


def test_variant_and_suite_filters(client: TestClient, db_session: Session, model_id: str) -> None:
    job = _job(client, model_id)
    _record(db_session, job, key="a" * 16, hours_ago=1, p50=2.0)
    _record(db_session, job, key="o" * 16, hours_ago=1, p50=4.0, variant="original")
    _record(db_session, job, key="s" * 16, hours_ago=1, p50=3.0, variant="fuse_gelu",
            suite="ablation")
    keys = {name: [c["config_key"] for c in client.get(
        f"/v1/models/{model_id}/benchmarks{query}").json()["items"]]
        for name, query in (("default", ""), ("original", "?variant=original"),
                            ("ablation", "?suite=ablation&variant=fuse_gelu"),
                            ("none", "?suite=ablation"))}
    assert keys == {"default": ["a" * 16], "original": ["o" * 16], "ablation": ["s" * 16],
                    "none": []}


def test_paging_counts_configurations(client: TestClient, db_session: Session,
                                      model_id: str) -> None:
    job = _job(client, model_id)
    for hours, key in enumerate("pqrst"):
        _record(db_session, job, key=key * 16, hours_ago=hours, p50=2.0)
    pages = [client.get(f"/v1/models/{model_id}/benchmarks?limit=2&offset={offset}").json()
             for offset in (0, 2, 4)]
    assert [p["total"] for p in pages] == [5, 5, 5]
    assert [c["config_key"][0] for p in pages for c in p["items"]] == list("pqrst")
    assert client.get(f"/v1/models/{model_id}/benchmarks?limit=0").status_code == 422


def test_a_page_costs_the_same_queries_however_many_jobs(client: TestClient, db_session: Session,
                                                         model_id: str) -> None:
    def statements_for(jobs: int) -> int:
        for _ in range(jobs):
            _record(db_session, _job(client, model_id), key="k" * 16, hours_ago=1, p50=2.0)
        seen: list[str] = []
        engine = db_session.get_bind().engine

        def count(*args: Any) -> None:
            seen.append(args[2])

        event.listen(engine, "before_cursor_execute", count)
        try:
            assert client.get(f"/v1/models/{model_id}/benchmarks").status_code == 200
        finally:
            event.remove(engine, "before_cursor_execute", count)
        return len(seen)

    one = statements_for(1)
    assert one > 0 and statements_for(6) == one


def test_unknown_or_another_projects_model_is_404(client: TestClient, db_session: Session,
                                                  settings: Settings, model_id: str) -> None:
    unknown = client.get(f"/v1/models/{uuid.uuid4()}/benchmarks")
    assert unknown.status_code == 404 and unknown.json()["error"] == "ModelNotFound"
    other = bearer(new_key(db_session, settings)[1])
    response = client.get(f"/v1/models/{model_id}/benchmarks", headers=other)
    assert response.status_code == 404 and response.json()["error"] == "ModelNotFound"


def test_a_model_without_records_has_an_empty_history(client: TestClient, model_id: str) -> None:
    assert client.get(f"/v1/models/{model_id}/benchmarks").json() == {
        "items": [], "total": 0, "limit": 50, "offset": 0}


def test_a_configuration_is_described_by_what_shipped(client: TestClient, db_session: Session,
                                                      model_id: str) -> None:
    """An int8 job whose quantizer found nothing to quantize shipped fp32 with the passes its
    fusion report names: that is what its configuration says, not the int8 it asked."""
    job_id = _job(client, model_id, precision="int8", quantization={"mode": "dynamic"})
    job = db_session.get(Job, job_id)
    assert job is not None
    job.accuracy_report = {"quantization": {"shipped": "fp32", "why": "nothing to quantize"}}
    job.fusion_report = {"passes_run": ["cleanup", "fold_batch_norm"], "excluded_rules": []}
    db_session.commit()
    _record(db_session, job_id, key="d" * 16, hours_ago=1, p50=2.0)

    [item] = client.get(f"/v1/models/{model_id}/benchmarks").json()["items"]
    assert item["config"]["precision"] == "fp32"
    assert item["config"]["quantization_mode"] is None
    assert item["config"]["passes"] == ["cleanup", "fold_batch_norm"]
