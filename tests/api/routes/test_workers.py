"""GET /v1/workers: what each recorded worker consumes and builds on, and whether it is online."""

from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from core.db.worker_registry import record_stopped
from tests.support.worker_heartbeats import CPU_ONLY, H200, beat


def test_workers_list_their_gpu_queues_and_whether_they_are_online(
        client: TestClient, db_session: Session) -> None:
    beat(db_session, "celery@gpu", H200, ["gpu", "gpu.sm90", "gpu.nvidia-h200"])
    beat(db_session, "celery@cpu", CPU_ONLY, ["cpu"], minutes_ago=1)
    beat(db_session, "celery@expired", CPU_ONLY, ["cpu"], minutes_ago=10)
    beat(db_session, "celery@stopped", H200, ["gpu"], minutes_ago=0.5)
    record_stopped(db_session, "celery@stopped")
    db_session.commit()

    response = client.get("/v1/workers")

    assert response.status_code == 200, response.text
    workers = {w["name"]: w for w in response.json()}
    assert [w["name"] for w in response.json()] == [
        "celery@gpu", "celery@stopped", "celery@cpu", "celery@expired"]  # latest beat first
    gpu = workers["celery@gpu"]
    assert gpu["online"] is True and gpu["queues"] == ["gpu", "gpu.sm90", "gpu.nvidia-h200"]
    assert (gpu["gpu_name"], gpu["compute_capability"], gpu["gpu_memory_mib"],
            gpu["tensorrt_version"]) == ("NVIDIA H200", "9.0", 143771, "11.4.0")
    assert workers["celery@cpu"]["online"] is True and workers["celery@cpu"]["gpu_name"] is None
    assert workers["celery@cpu"]["capabilities"]["notes"] == ["nvidia-smi not found"]
    assert workers["celery@expired"]["online"] is False
    assert workers["celery@stopped"]["online"] is False
    assert workers["celery@stopped"]["stopped_at"] is not None


def test_online_filter_leaves_out_expired_and_stopped_workers(
        client: TestClient, db_session: Session) -> None:
    beat(db_session, "celery@gpu", H200, ["gpu"])
    beat(db_session, "celery@expired", CPU_ONLY, ["cpu"], minutes_ago=10)

    names = [w["name"] for w in client.get("/v1/workers", params={"online": "true"}).json()]

    assert names == ["celery@gpu"]


def test_online_filter_that_is_not_a_boolean_is_a_422(client: TestClient) -> None:
    response = client.get("/v1/workers", params={"online": "maybe"})
    assert response.status_code == 422
    assert "online" in response.text
