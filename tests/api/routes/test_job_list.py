"""GET /v1/jobs as a jobs table reads it: each item names its model, backend and precision,
and gives the headline speed-up, the validation verdict and the run's duration once the job has
them; filters by backend and by part of the model's name narrow the list, with the others."""

import uuid
from datetime import timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import event
from sqlalchemy.orm import Session

from api.deps import get_job_cache
from api.services.jobs.documents import JobDocumentCache
from core.db.models import Job
from optimizer.testing.models import mlp, model_bytes, small_cnn
from tests.support.job_rows import finish


def upload(client: TestClient, name: str, data: bytes | None = None) -> str:
    response = client.post("/v1/models", files={"file": (name, data or model_bytes(small_cnn()))})
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def submit(client: TestClient, model_id: str, **config: Any) -> str:
    response = client.post("/v1/jobs", json={"model_id": model_id, **config})
    assert response.status_code == 202, response.text
    return str(response.json()["id"])


def listed(client: TestClient, **params: Any) -> dict[str, dict[str, Any]]:
    response = client.get("/v1/jobs", params=params)
    assert response.status_code == 200, response.text
    return {item["id"]: item for item in response.json()["items"]}


def test_a_queued_job_names_its_model_and_config_and_has_no_results_yet(
        client: TestClient) -> None:
    model = upload(client, "ResNet-Block.onnx")
    job = submit(client, model, precision="fp16")

    item = listed(client)[job]

    assert {k: item[k] for k in ("model_id", "model_name", "backend", "precision")} == {
        "model_id": model, "model_name": "ResNet-Block.onnx", "backend": "onnxruntime",
        "precision": "fp16"}
    assert (item["speedup"], item["validation_passed"], item["duration_s"]) == (None, None, None)


def test_a_finished_job_shows_its_engine_speedup_verdict_and_duration(
        client: TestClient, db_session: Session) -> None:
    model = upload(client, "cnn.onnx")
    passed, failed = submit(client, model), submit(client, model)
    finish(db_session, passed, speedup=1.42, passed=[True, True], took=timedelta(seconds=2.5))
    finish(db_session, failed, speedup=0.9, passed=[True, False], took=timedelta(minutes=3))

    items = listed(client)

    assert (items[passed]["speedup"], items[passed]["validation_passed"],
            items[passed]["duration_s"]) == (1.42, True, 2.5)
    assert (items[failed]["speedup"], items[failed]["validation_passed"],
            items[failed]["duration_s"]) == (0.9, False, 180.0)
    # The job's own document shows the same, beside the records they come from.
    document = client.get(f"/v1/jobs/{passed}").json()
    assert {k: document[k] for k in items[passed]} == items[passed]
    assert document["validation"]["passed"] is True
    # Its outcome: asked and shipped, the verdicts, and the one headline (issue 45).
    outcome = items[passed]["outcome"]
    assert outcome == document["outcome"]
    assert outcome["shipped"]["label"] == "onnxruntime fp32 engine"
    assert outcome["accuracy"]["verdict"] == "passed"
    assert outcome["headline"] == ("Shipped the onnxruntime fp32 engine: 1.42x the original's "
                                   "speed (no interval to judge it by), accuracy passed.")
    assert items[failed]["outcome"]["accuracy"]["verdict"] == "failed"


def test_a_failed_or_cancelled_job_has_an_outcome_and_a_queued_one_none(
        client: TestClient) -> None:
    model = upload(client, "cnn.onnx")
    queued, cancelled = submit(client, model, precision="int8"), submit(client, model)
    assert client.post(f"/v1/jobs/{cancelled}/cancel").status_code == 200

    items = listed(client)

    assert items[queued]["outcome"] is None
    assert items[cancelled]["outcome"]["shipped"] is None
    assert items[cancelled]["outcome"]["headline"] == \
        "Cancelled: nothing shipped (onnxruntime fp32 asked)."
    assert client.get(f"/v1/jobs/{cancelled}").json()["outcome"] == items[cancelled]["outcome"]


def test_a_search_jobs_precision_is_its_winners_once_it_has_one(
        client: TestClient, db_session: Session) -> None:
    model = upload(client, "cnn.onnx")
    job = submit(client, model, search={"time_budget_s": 60})
    assert listed(client)[job]["precision"] == "fp32"  # searching: the stored config's

    row = db_session.get(Job, uuid.UUID(job))
    assert row is not None
    row.search_report = {"winner": "int8-static/all", "recipe": {"precision": "int8"}}
    db_session.commit()

    assert listed(client)[job]["precision"] == "int8"
    assert client.get(f"/v1/jobs/{job}").json()["precision"] == "int8"


def test_a_page_is_read_in_a_bounded_number_of_queries(
        client: TestClient, db_session: Session) -> None:
    model = upload(client, "cnn.onnx")
    for _ in range(2):
        finish(db_session, submit(client, model), speedup=1.1, passed=[True],
               took=timedelta(seconds=1))
    statements: list[str] = []

    def count(*args: Any) -> None:
        statements.append(args[2])

    engine = db_session.get_bind()
    event.listen(engine, "before_cursor_execute", count)
    try:
        assert len(listed(client)) == 2
        few = len(statements)
        for _ in range(8):
            finish(db_session, submit(client, model), speedup=1.1, passed=[True],
                   took=timedelta(seconds=1))
        statements.clear()
        assert len(listed(client)) == 10
    finally:
        event.remove(engine, "before_cursor_execute", count)

    assert len(statements) == few  # ten jobs cost what two did: no query per job


@pytest.fixture
def three_jobs(client: TestClient) -> dict[str, str]:
    """An onnxruntime and a tensorrt job of "Vision-CNN.onnx", one of "mlp_50%.onnx"."""
    cnn = upload(client, "Vision-CNN.onnx")
    other = upload(client, "mlp_50%.onnx", model_bytes(mlp()))
    return {"cnn_ort": submit(client, cnn), "cnn_trt": submit(client, cnn, backend="tensorrt"),
            "mlp_ort": submit(client, other)}


def test_backend_filter_keeps_that_backends_jobs(client: TestClient,
                                                 three_jobs: dict[str, str]) -> None:
    assert set(listed(client, backend="tensorrt")) == {three_jobs["cnn_trt"]}
    assert set(listed(client, backend="onnxruntime")) == {three_jobs["cnn_ort"],
                                                           three_jobs["mlp_ort"]}
    assert client.get("/v1/jobs", params={"backend": "tensorrt"}).json()["total"] == 1


def test_q_matches_part_of_the_model_name_in_any_case(client: TestClient,
                                                      three_jobs: dict[str, str]) -> None:
    assert set(listed(client, q="vision-")) == {three_jobs["cnn_ort"], three_jobs["cnn_trt"]}
    assert set(listed(client, q="MLP")) == {three_jobs["mlp_ort"]}
    assert set(listed(client, q="50%")) == {three_jobs["mlp_ort"]}
    assert listed(client, q="0%.o") and not listed(client, q="5_%")  # % and _ are literal
    assert client.get("/v1/jobs", params={"q": "cnn"}).json()["total"] == 2


def test_filters_combine(client: TestClient, db_session: Session,
                         three_jobs: dict[str, str]) -> None:
    cnn_model = listed(client)[three_jobs["cnn_ort"]]["model_id"]
    client.post(f"/v1/jobs/{three_jobs['cnn_ort']}/cancel")

    assert set(listed(client, q="cnn", backend="onnxruntime")) == {three_jobs["cnn_ort"]}
    assert listed(client, q="cnn", backend="onnxruntime", status="queued") == {}
    assert set(listed(client, model_id=cnn_model, status="queued")) == {three_jobs["cnn_trt"]}
    assert listed(client, q="mlp", model_id=cnn_model) == {}


@pytest.mark.parametrize(("params", "named"), [
    ({"backend": "tensorflow"}, "backend"),
    ({"backend": ""}, "backend"),
    ({"q": "x" * 256}, "q"),
    ({"q": "cnn\x00"}, "q"),  # PostgreSQL refuses a NUL in any text: never a 500
    ({"q": "a\nb"}, "q"),
])
def test_a_bad_filter_is_422_naming_it(client: TestClient, params: dict[str, str],
                                       named: str) -> None:
    response = client.get("/v1/jobs", params=params)

    assert response.status_code == 422
    assert response.json()["detail"].startswith(f"{named}: ")


def test_each_filter_has_its_own_cached_page(client: TestClient,
                                             three_jobs: dict[str, str]) -> None:
    # With a read cache (tests run without one), a filtered page is never another's.
    cache = JobDocumentCache(fresh_s=60)
    client.app.dependency_overrides[get_job_cache] = lambda: cache  # type: ignore[attr-defined]

    everything = listed(client)
    trt, mlp = listed(client, backend="tensorrt"), listed(client, q="mlp")

    assert len(everything) == 3
    assert set(trt) == {three_jobs["cnn_trt"]} and set(mlp) == {three_jobs["mlp_ort"]}
