"""POST /v1/jobs?dry_run=true: the plan of a job or a search before any worker time is spent
(the fusion rules that fire or refuse, the candidates and the refused with their reasons, each
node class's precision per candidate, a time estimate), with the same refusals as a real
submit, and nothing written or queued."""

import uuid
from datetime import timedelta
from typing import Any

import pytest
import redis
from fastapi.testclient import TestClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from core.db import job_state
from core.db.models import Job, JobEvent, SearchCandidate
from optimizer.testing.models import model_bytes
from optimizer.testing.quantization_models import conv_stack


def _model(client: TestClient, seed: int = 0) -> str:
    data = model_bytes(conv_stack(seed=seed, channels=16, size=16, blocks=2))
    response = client.post("/v1/models", files={"file": ("convnet.onnx", data)})
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def _dry_run(client: TestClient, **body: Any) -> dict[str, Any]:
    response = client.post("/v1/jobs", params={"dry_run": "true"}, json=body)
    assert response.status_code == 200, response.text
    return response.json()  # type: ignore[no-any-return]


def _rows(db_session: Session) -> tuple[int, int]:
    return (int(db_session.scalar(select(func.count()).select_from(Job)) or 0),
            int(db_session.scalar(select(func.count()).select_from(JobEvent)) or 0))


def test_a_search_dry_run_answers_the_plan_and_writes_and_queues_nothing(
        client: TestClient, db_session: Session, broker: redis.Redis) -> None:
    model_id = _model(client)
    before = _rows(db_session)
    answer = _dry_run(client, model_id=model_id, search={"time_budget_s": 300})

    assert _rows(db_session) == before and broker.llen("cpu") == 0
    assert answer["dry_run"] is True and answer["config"]["search"]["time_budget_s"] == 300
    plan = answer["plan"]
    names = [c["name"] for c in plan["candidates"]]
    assert "fp32/all" in names and "fp32/none" in names
    # only the families that rewrite this convnet get an "off" candidate
    fired = {rule["pass"] for rule in plan["rules"] if rule["applied"]}
    assert {n.removeprefix("fp32/without-") for n in names if "/without-" in n} == fired
    assert plan["nodes_after"] < plan["nodes_before"]
    refused = {r["name"]: r["reason"] for r in plan["refused"]}
    assert "calibration" in refused["int8-static"]
    int8 = next(c for c in plan["candidates"] if c["name"].startswith("int8-dynamic"))
    assert int8["precisions"]["Conv"] == "float (not quantized)"  # dynamic: matrix products only
    fp16 = next(c for c in plan["candidates"] if c["name"] == "fp16/all")
    assert set(fp16["precisions"].values()) >= {"fp16"}
    estimate = answer["estimate"]
    assert estimate["seconds"] is None and estimate["upper_bound_s"] == 300
    assert "no finished search to go by" in estimate["basis"]


def test_a_dry_run_of_a_search_over_two_backends_plans_each_backends_candidates(
        client: TestClient, broker: redis.Redis) -> None:
    plan = _dry_run(client, model_id=_model(client), backend="tensorrt", search={
        "backends": ["tensorrt", "onnxruntime"], "precisions": ["bf16", "int8"]})["plan"]

    names = [c["name"] for c in plan["candidates"]]
    # the backends take turns, the job's own first
    # each backend's float contender first (it builds in seconds), then its quantized ones
    assert names == ["tensorrt:bf16/all", "onnxruntime:int8-dynamic/all",
                     "tensorrt:int8-dynamic/all"]
    refused = {r["name"]: r["reason"] for r in plan["refused"]}
    assert "bf16 kernels" in refused["onnxruntime:bf16"]
    assert "calibration" in refused["tensorrt:int8-static"]
    recipes = {c["name"]: c["recipe"] for c in plan["candidates"]}
    assert recipes["onnxruntime:int8-dynamic/all"]["backend"] == "onnxruntime"
    assert recipes["tensorrt:bf16/all"]["backend"] == "tensorrt"
    bf16 = next(c for c in plan["candidates"] if c["name"] == "tensorrt:bf16/all")
    assert "bf16" in set(bf16["precisions"].values())


def test_a_plain_jobs_dry_run_has_its_one_candidate(client: TestClient, broker: redis.Redis
                                                     ) -> None:
    plan = _dry_run(client, model_id=_model(client), passes="none")["plan"]

    assert [c["name"] for c in plan["candidates"]] == ["the job"]
    assert plan["nodes_after"] == plan["nodes_before"] and not plan["refused"]


def _finished(db_session: Session, job_id: uuid.UUID, seconds: float) -> None:
    assert job_state.claim(db_session, job_id, "test:1") is not None
    assert job_state.succeed(db_session, job_id) is not None
    job = db_session.get(Job, job_id)
    assert job is not None and job.started_at is not None
    job.finished_at = job.started_at + timedelta(seconds=seconds)
    db_session.commit()


def test_the_estimate_reads_the_models_finished_jobs_and_searches(
        client: TestClient, db_session: Session, broker: redis.Redis) -> None:
    model_id = _model(client, seed=1)
    plain_job = uuid.UUID(client.post("/v1/jobs", json={"model_id": model_id}).json()["id"])
    _finished(db_session, plain_job, 40)
    search_job = uuid.UUID(client.post("/v1/jobs", json={
        "model_id": model_id, "search": {"time_budget_s": 600}}).json()["id"])
    for name, build_s in (("fp32/all", 2.0), ("fp32/none", 4.0), ("fp16/all", 3.0)):
        db_session.add(SearchCandidate(job_id=search_job, name=name, outcome="timed",
                                       recipe={}, build_s=build_s))
    _finished(db_session, search_job, 500)  # a search's run is not a job's: left out

    plain = _dry_run(client, model_id=model_id)["estimate"]
    answer = _dry_run(client, model_id=model_id, search={"time_budget_s": 600})
    search, candidates = answer["estimate"], len(answer["plan"]["candidates"])
    other_model = _dry_run(client, model_id=_model(client, seed=2))["estimate"]

    assert plain["seconds"] == 40 and "this model's last 1 succeeded jobs" in plain["basis"]
    assert search["seconds"] == candidates * 3.0 + 40  # the median candidate, then the winner
    assert search["upper_bound_s"] == 600 + 40
    # another model of the backend: scaled by size from this one's
    assert other_model["seconds"] is not None and "per byte of model" in other_model["basis"]


def test_without_a_plain_job_a_searchs_winner_is_estimated_as_a_candidate(
        client: TestClient, db_session: Session, broker: redis.Redis) -> None:
    model_id = _model(client, seed=3)
    search_job = uuid.UUID(client.post("/v1/jobs", json={
        "model_id": model_id, "search": {"time_budget_s": 600}}).json()["id"])
    db_session.add(SearchCandidate(job_id=search_job, name="fp32/all", outcome="timed",
                                   recipe={}, build_s=5.0))
    _finished(db_session, search_job, 100)

    answer = _dry_run(client, model_id=model_id, search={"time_budget_s": 600})
    estimate = answer["estimate"]

    assert estimate["seconds"] == len(answer["plan"]["candidates"]) * 5.0 + 5.0
    assert "the winner's run at the median of this model's last 1 search candidates" in \
        estimate["basis"]


def test_a_finished_searchs_race_counts_in_the_estimate_per_variant_raced(
        client: TestClient, db_session: Session, broker: redis.Redis) -> None:
    model_id = _model(client, seed=4)
    search_job = uuid.UUID(client.post("/v1/jobs", json={
        "model_id": model_id, "search": {"time_budget_s": 600}}).json()["id"])
    db_session.add(SearchCandidate(job_id=search_job, name="fp32/all", outcome="timed",
                                   recipe={}, build_s=4.0))
    _finished(db_session, search_job, 30)
    job = db_session.get(Job, search_job)
    assert job is not None
    # 30 s in all, 4 + 5 s of it building: 21 s of race over 2 raced candidates and the original
    job.search_report = {"elapsed_s": 30.0, "rows": [
        {"name": "fp32/all", "build_s": 4.0, "latency_ms_p50": 1.0},
        {"name": "fp32/none", "build_s": 5.0, "latency_ms_p50": 1.1},
        {"name": "int8-static", "outcome": "refused"}]}
    db_session.commit()

    answer = _dry_run(client, model_id=model_id, search={"time_budget_s": 600})
    estimate, count = answer["estimate"], len(answer["plan"]["candidates"])

    assert estimate["seconds"] == pytest.approx(count * 4.0 + count * 7.0 + 4.0, abs=0.1)
    assert "the race at the median of this model's last 1 searches' races" in estimate["basis"]


def test_a_dry_run_refuses_what_a_submit_refuses(client: TestClient, broker: redis.Redis
                                                 ) -> None:
    model_id = _model(client)
    bad_shape = client.post("/v1/jobs", params={"dry_run": "true"}, json={
        "model_id": model_id, "input_shapes": {"input": [1, 3]}})
    two_things = client.post("/v1/jobs", params={"dry_run": "true"}, json={
        "model_id": model_id, "precision": "fp16", "search": {}})
    missing = client.post("/v1/jobs", params={"dry_run": "true"}, json={
        "model_id": str(uuid.uuid4())})

    assert bad_shape.status_code == 422 and "input" in bad_shape.text
    assert two_things.status_code == 422 and two_things.json()["detail"].startswith("precision:")
    assert missing.status_code == 404
