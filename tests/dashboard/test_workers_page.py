"""The workers page: online workers with what they build on and the job each runs for this
project, and this project's TensorRT jobs that wait for a capable worker, with the reason."""

import re
import uuid

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from core.db.models import Job, JobStatus, Model
from core.db.types import utc_now
from core.job_config import JobConfig
from core.settings import Settings
from tests.support.api_keys import new_key
from tests.support.worker_heartbeats import CPU_ONLY, H200, beat

WAITING = "waiting for a worker: no online worker has a GPU of compute capability 8.9"


def _job(session: Session, project_id: uuid.UUID, status: JobStatus, *, backend: str,
         worker: str | None = None, detail: str | None = None, name: str = "vit.onnx") -> Job:
    model = Model(project_id=project_id, name=name, sha256=uuid.uuid4().hex * 2, size_bytes=1,
                  storage_uri=f"store://models/{name}", ir_version=10, opset=17,
                  producer="test", inputs=[], outputs=[])
    session.add(model)
    session.flush()
    job = Job(project_id=project_id, model_id=model.id, status=status.value,
              config=JobConfig(backend=backend, precision="fp16").model_dump(mode="json"),
              worker=worker, status_detail=detail, stage="build" if worker else None,
              progress=0.5 if worker else 0.0, started_at=utc_now() if worker else None)
    session.add(job)
    session.commit()
    return job


def _table(html: str, table_id: str) -> str:
    match = re.search(rf'<table id="{table_id}".*?</table>', html, re.S)
    assert match, f"no table#{table_id}"
    return match.group(0)


def _section(html: str, section_id: str) -> str:
    match = re.search(rf'<section id="{section_id}".*?</section>', html, re.S)
    assert match, f"no #{section_id}"
    return match.group(0)


@pytest.fixture
def project(api_key: tuple[uuid.UUID, str]) -> uuid.UUID:
    return api_key[0]


def test_online_workers_show_gpu_compute_capability_and_tensorrt(
        signed_in_site: TestClient, db_session: Session) -> None:
    beat(db_session, "celery@gpu", H200, ["gpu", "gpu.sm90"])
    beat(db_session, "celery@cpu", CPU_ONLY, ["cpu"], minutes_ago=1)
    beat(db_session, "celery@gone", H200, ["gpu"], minutes_ago=30)

    response = signed_in_site.get("/ui/workers")

    assert response.status_code == 200, response.text
    table = _table(response.text, "workers")
    assert re.findall(r'<tr data-worker="([^"]+)"', table) == ["celery@gpu", "celery@cpu"]
    gpu_row = re.search(r'<tr data-worker="celery@gpu".*?</tr>', table, re.S)
    assert gpu_row
    for shown in ("NVIDIA H200", "9.0", "11.4.0", "gpu.sm90", ">online<"):
        assert shown in gpu_row.group(0)
    assert "none (CPU only)" in table
    # an offline worker is listed apart, never as a row of table#workers
    assert "celery@gone" not in table
    assert '<tr data-offline-worker="celery@gone">' in response.text


def test_a_workers_current_job_of_this_project_is_linked(
        signed_in_site: TestClient, db_session: Session, project: uuid.UUID,
        settings: Settings) -> None:
    beat(db_session, "celery@gpu", H200, ["gpu"])
    beat(db_session, "celery@gpu2", H200, ["gpu"])
    ours = _job(db_session, project, JobStatus.RUNNING, backend="tensorrt", worker="celery@gpu")
    other_project, _ = new_key(db_session, settings)
    theirs = _job(db_session, other_project, JobStatus.RUNNING, backend="tensorrt",
                  worker="celery@gpu2")

    table = _table(signed_in_site.get("/ui/workers").text, "workers")

    gpu_row = re.search(r'<tr data-worker="celery@gpu".*?</tr>', table, re.S)
    assert gpu_row and f'href="/ui/jobs/{ours.id}"' in gpu_row.group(0)
    assert str(theirs.id) not in table


def test_waiting_tensorrt_jobs_say_why(
        signed_in_site: TestClient, db_session: Session, project: uuid.UUID,
        settings: Settings) -> None:
    waiting = _job(db_session, project, JobStatus.QUEUED, backend="tensorrt", detail=WAITING)
    cpu_job = _job(db_session, project, JobStatus.QUEUED, backend="onnxruntime")
    other_project, _ = new_key(db_session, settings)
    theirs = _job(db_session, other_project, JobStatus.QUEUED, backend="tensorrt", detail=WAITING)

    section = _section(signed_in_site.get("/ui/workers").text, "waiting-jobs")

    assert f'href="/ui/jobs/{waiting.id}"' in section
    assert WAITING in section
    assert str(cpu_job.id) not in section
    assert str(theirs.id) not in section


def test_no_workers_and_no_waiting_jobs_show_empty_states(signed_in_site: TestClient) -> None:
    response = signed_in_site.get("/ui/workers")
    assert response.status_code == 200
    assert '<p class="empty">No worker is online' in response.text
    # every backend that needs something of its host is named (TensorRT, OpenVINO)
    assert '<p class="empty">No TensorRT or OpenVINO job is waiting' in _section(
        response.text, "waiting-jobs")
    assert 'id="workers"' not in response.text
