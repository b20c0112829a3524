"""A job deleted while its webhook attempt is on the wire: the attempt ends quietly (nothing
recorded, no retry) instead of failing its task on the missing row. A real database and a real
HTTP receiver (which deletes the job before it answers)."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, delete, func, select
from sqlalchemy.orm import Session, sessionmaker

from core.db.models import DEFAULT_PROJECT_ID, Job, JobEvent, JobStatus, Model, WebhookDelivery
from core.job_config import JobConfig
from core.settings import Settings, WebhookSettings
from core.webhooks.delivery import deliver_attempt
from tests.support.databases import fresh_database


@pytest.fixture(params=["sqlite", "postgresql"])
def sessions(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[sessionmaker[Session]]:
    engine: Engine
    with fresh_database(request.param, tmp_path, name="fuseforge_hooks") as engine:
        yield sessionmaker(bind=engine, expire_on_commit=False)


@pytest.fixture
def deleting_receiver(sessions: sessionmaker[Session]) -> Iterator[tuple[str, list[str]]]:
    """(url, paths received): each POST deletes its job (named in the path), then answers 200."""
    received: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's naming
            self.rfile.read(int(self.headers["Content-Length"]))
            job_id = uuid.UUID(self.path.rsplit("/", 1)[-1])
            with sessions() as session, session.begin():
                session.execute(delete(JobEvent).where(JobEvent.job_id == job_id))
                session.execute(delete(Job).where(Job.id == job_id))
            received.append(self.path)
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *_: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/hooks", received
    server.shutdown()
    server.server_close()


def test_a_job_deleted_during_its_webhook_attempt_ends_it_quietly(
        tmp_path: Path, sessions: sessionmaker[Session],
        deleting_receiver: tuple[str, list[str]]) -> None:
    url, received = deleting_receiver
    with sessions() as session, session.begin():
        model = Model(project_id=DEFAULT_PROJECT_ID, name="m", sha256="a" * 64, size_bytes=1,
                      storage_uri="store://models/m.onnx", ir_version=8, opset=17,
                      producer="test", inputs=[], outputs=[])
        job = Job(id=uuid.uuid4(), project_id=DEFAULT_PROJECT_ID, model=model,
                  status=JobStatus.SUCCEEDED.value, config={})
        job.config = JobConfig(callback_url=f"{url}/{job.id}").model_dump(mode="json")
        session.add(job)
    settings = Settings(env="test", data_dir=tmp_path / "data", webhooks=WebhookSettings(
        secret="s" * 32, allowed_networks=["127.0.0.0/8"], timeout_s=5))

    assert deliver_attempt(sessions, job.id, settings) is None

    assert received == [f"/hooks/{job.id}"]
    with sessions() as session:
        assert session.scalar(select(func.count()).select_from(WebhookDelivery)) == 0
