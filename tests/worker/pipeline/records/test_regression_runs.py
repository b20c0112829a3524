"""Regression detection on real runs: an embedded worker runs jobs end to end; earlier engine
records of the same configuration and environment are planted around them (much faster: the
next identical job is flagged; much slower, or faster on another environment: it is not).

Judging needs the records' speed-up intervals (optimizer/measure/stats.py); on a tree
whose benchmark stage does not compute them yet these tests skip, saying so."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from sqlalchemy import Engine
from sqlalchemy.orm import sessionmaker

from core.db.models import BenchmarkRecord, Job, JobStatus
from core.db.types import utc_now
from optimizer.testing.models import model_bytes, small_cnn
from tests.support.embedded_worker import EmbeddedWorker

CONFIG: dict[str, Any] = {"input_shapes": {"input": [2, 3, 32, 32]},
                          "benchmark": {"warmup": 1, "iterations": 5, "measure_memory": False},
                          "validation": {"samples": 2}}


def _engine_record(job: dict[str, Any]) -> dict[str, Any]:
    assert job["status"] == "succeeded", job["error"]
    [record] = [b for b in job["benchmarks"]
                if b["suite"] == "comparison" and b["variant"] == "engine"]
    if record["speedup_ci_low"] is None:
        pytest.skip("this tree's benchmark stage computes no speed-up intervals to judge by")
    return record


def _plant(worker_database: Engine, like_job: str, model_id: str, record: dict[str, Any], *,
           scale: float, environment_key: str | None = None) -> uuid.UUID:
    """A succeeded job of `model_id` (in `like_job`'s project) whose engine record has
    `record`'s keys and `scale` times its latencies (its speed-up over the same original divided
    by `scale`), with tight intervals."""
    sessions = sessionmaker(worker_database, expire_on_commit=False)
    with sessions() as session, session.begin():
        like = session.get(Job, uuid.UUID(like_job))
        assert like is not None
        earlier = Job(project_id=like.project_id, model_id=uuid.UUID(model_id), config=like.config,
                      status=JobStatus.SUCCEEDED.value, finished_at=utc_now())
        session.add(earlier)
        session.flush()
        p50 = record["latency_ms_p50"] * scale
        fields = {name: record[name] for name in (
            "backend", "batch_size", "iterations", "warmup", "latency_ms_p90", "latency_ms_p99",
            "latency_ms_mean", "throughput_per_s", "config_key")}
        speedup = record["speedup_vs_reference"] / scale  # the same original, a faster engine
        session.add(BenchmarkRecord(
            **fields, job_id=earlier.id, suite="comparison", variant="engine", latency_ms_p50=p50,
            latency_ms_p50_ci_low=p50 * 0.99, latency_ms_p50_ci_high=p50 * 1.01,
            speedup_vs_reference=speedup, speedup_ci_low=speedup * 0.99,
            speedup_ci_high=speedup * 1.01,
            environment_key=environment_key or record["environment_key"]))
        return earlier.id


def _regression_events(job: dict[str, Any]) -> list[str]:
    return [e["message"] for e in job["events"] if e["message"].startswith("regression: ")]


def test_an_identical_job_slower_than_a_planted_earlier_one_is_flagged(
        embedded: EmbeddedWorker, worker_database: Engine) -> None:
    model_id = embedded.upload(model_bytes(small_cnn(seed=71)), "cnn.onnx")
    first = embedded.wait(embedded.submit(model_id, **CONFIG))
    record = _engine_record(first)
    assert first["regression"] is None and record["config_key"] is not None
    planted = _plant(worker_database, first["id"], model_id, record, scale=0.01)

    second = embedded.wait(embedded.submit(model_id, **CONFIG))
    regression = _engine_record(second)["regression"]
    assert regression is not None and second["regression"] == regression
    assert regression["against_job"] == str(planted)
    assert regression["slowdown"] > 10
    assert regression["detail"].startswith("engine ")
    assert "the original's speed" in regression["detail"]
    assert _regression_events(second) == [f"regression: {regression['detail']}"]


def test_slower_history_or_another_environment_does_not_flag(
        embedded: EmbeddedWorker, worker_database: Engine) -> None:
    reference = embedded.wait(embedded.submit(
        embedded.upload(model_bytes(small_cnn(seed=72)), "cnn.onnx"), **CONFIG))
    record = _engine_record(reference)
    # Same architecture and config, other weights: the same configuration key, no runs yet.
    model_id = embedded.upload(model_bytes(small_cnn(seed=73)), "cnn.onnx")
    _plant(worker_database, reference["id"], model_id, record, scale=100.0)
    _plant(worker_database, reference["id"], model_id, record, scale=0.01,
           environment_key="0" * 16)

    job = embedded.wait(embedded.submit(model_id, **CONFIG))
    assert _engine_record(job)["config_key"] == record["config_key"]
    assert job["regression"] is None
    assert _regression_events(job) == []
