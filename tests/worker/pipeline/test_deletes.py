"""Deletes and retention on jobs a real worker ran: a running job, and its model, cannot be
deleted until it ends; then every row and file goes. Retention removes a long finished job's
artifact files (a download answers 410) and keeps a recent one's."""

from __future__ import annotations

import time
import uuid
from datetime import timedelta

from sqlalchemy import update

from core.db.models import Job
from core.db.types import utc_now
from core.dispatch import JobDispatcher
from core.settings import RetentionSettings
from optimizer.testing.models import model_bytes, small_cnn
from tests.support.embedded_worker import EmbeddedWorker
from worker.janitor import Janitor

FAST_BENCHMARK = {"warmup": 1, "iterations": 3, "measure_memory": False}
SLOW_BENCHMARK = {"warmup": 0, "iterations": 5000, "measure_memory": False}


def _running_in_benchmark(embedded: EmbeddedWorker, model_id: str) -> str:
    job_id = embedded.submit(model_id, benchmark=SLOW_BENCHMARK)
    deadline = time.monotonic() + 120
    while embedded.job(job_id)["stage"] != "benchmark":
        assert time.monotonic() < deadline, "the job never reached its benchmark"
        time.sleep(0.02)
    return job_id


def _janitor(embedded: EmbeddedWorker, artifacts_days: float) -> Janitor:
    runtime = embedded.runtime
    settings = runtime.settings.model_copy(
        update={"retention": RetentionSettings(artifacts_days=artifacts_days)})
    return Janitor(settings, runtime.sessions, JobDispatcher(settings.resolved_broker_url),
                   runtime.store)


def test_a_running_job_and_its_model_are_deleted_only_once_it_has_ended(
        embedded: EmbeddedWorker) -> None:
    client, settings = embedded.client, embedded.runtime.settings
    model = client.post("/v1/models", files={"file": ("cnn.onnx", model_bytes(small_cnn(seed=31)))}
                        ).json()
    done = embedded.wait(embedded.submit(model["id"], benchmark=FAST_BENCHMARK))
    assert done["status"] == "succeeded", done["error"]
    running = _running_in_benchmark(embedded, model["id"])

    refused_job = client.delete(f"/v1/jobs/{running}")
    refused_model = client.delete(f"/v1/models/{model['id']}")

    assert refused_job.status_code == 409 and "cancel it first" in refused_job.json()["detail"]
    assert refused_model.status_code == 409 and running in refused_model.json()["detail"]
    assert embedded.job(done["id"])["artifacts"]
    assert (settings.artifacts_dir / "jobs" / done["id"]).is_dir()

    assert client.post(f"/v1/jobs/{running}/cancel").status_code == 200
    assert client.delete(f"/v1/jobs/{running}").status_code == 204
    assert client.get(f"/v1/jobs/{running}").status_code == 404
    # The worker takes its next job: the cancelled run let go of the deleted one.
    after = embedded.wait(embedded.submit(model["id"], benchmark=FAST_BENCHMARK))
    assert after["status"] == "succeeded", after["error"]

    assert client.delete(f"/v1/models/{model['id']}").status_code == 204
    for job_id in (done["id"], after["id"]):
        assert client.get(f"/v1/jobs/{job_id}").status_code == 404
        assert not (settings.artifacts_dir / "jobs" / job_id).exists()
    assert not (settings.artifacts_dir / "models" / f"{model['sha256']}.onnx").exists()
    assert client.get(f"/v1/models/{model['id']}").status_code == 404


def test_retention_removes_a_finished_jobs_artifact_files_and_a_download_answers_410(
        embedded: EmbeddedWorker) -> None:
    client, settings = embedded.client, embedded.runtime.settings
    model_id = embedded.upload(model_bytes(small_cnn(seed=32)), "cnn.onnx")
    old, recent = (embedded.wait(embedded.submit(model_id, benchmark=FAST_BENCHMARK))
                   for _ in range(2))
    assert old["status"] == recent["status"] == "succeeded", (old["error"], recent["error"])
    with embedded.runtime.sessions() as session, session.begin():
        session.execute(update(Job).where(Job.id == uuid.UUID(old["id"]))
                        .values(finished_at=utc_now() - timedelta(days=2)))

    _janitor(embedded, artifacts_days=1).apply_retention()

    response = client.get(f"/v1/jobs/{old['id']}/artifacts/engine.onnx")
    assert response.status_code == 410, response.text
    assert response.json()["error"] == "ArtifactExpired"
    assert "FUSEFORGE_RETENTION__ARTIFACTS_DAYS" in response.json()["detail"]
    assert not (settings.artifacts_dir / "jobs" / old["id"]).exists()
    kept = client.get(f"/v1/jobs/{recent['id']}/artifacts/engine.onnx")
    assert kept.status_code == 200 and kept.headers["X-Content-SHA256"] == next(
        a["sha256"] for a in recent["artifacts"] if a["name"] == "engine.onnx")
    assert client.delete(f"/v1/jobs/{old['id']}").status_code == 204
