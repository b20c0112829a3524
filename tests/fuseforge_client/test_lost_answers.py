"""The client against the API in this process (real database and Redis): when the answer to an
upload or a job submission is lost after the server did the work, the client sends it again
with the same Idempotency-Key and the server answers with the first result: one model, one job,
one dispatch."""

from __future__ import annotations

import uuid
from pathlib import Path

import httpx
import pytest
import redis
from fastapi.testclient import TestClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from core.db.models import Job, Model
from fuseforge_client import ConnectionFailedError, FuseForgeClient
from optimizer.testing.models import model_bytes, small_cnn


class LosesFirstAnswers(httpx.BaseTransport):
    """Hands each request to the app; the first answer to each path in `lose` is dropped on
    the way back (the app has done the work), as a connection reset would."""

    def __init__(self, app: TestClient, lose: set[str]) -> None:
        self._app = app
        self._lose = set(lose)
        self.lost: list[str] = []
        self.keys: list[str | None] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if request.method == "POST":
            self.keys.append(request.headers.get("idempotency-key"))
        answer = self._app.send(request)
        if request.url.path in self._lose:
            self._lose.remove(request.url.path)
            self.lost.append(request.url.path)
            raise httpx.ReadError("connection reset by peer", request=request)
        return httpx.Response(answer.status_code, headers=answer.headers, content=answer.content)


def _count(db_session: Session, table: type[Job] | type[Model], project: uuid.UUID) -> int:
    return int(db_session.scalar(select(func.count()).select_from(table)
                                 .where(table.project_id == project)) or 0)


def test_an_upload_and_a_submit_whose_answers_were_lost_make_one_model_and_one_job(
        client: TestClient, api_key: tuple[uuid.UUID, str], db_session: Session,
        broker: redis.Redis, tmp_path: Path) -> None:
    project, key = api_key
    path = tmp_path / "cnn.onnx"
    path.write_bytes(model_bytes(small_cnn()))
    transport = LosesFirstAnswers(client, lose={"/v1/models", "/v1/jobs"})
    sleeps: list[float] = []

    with FuseForgeClient("http://testserver", api_key=key, transport=transport,
                         sleep=sleeps.append) as fuseforge:
        model = fuseforge.upload_model(path)
        job = fuseforge.submit_job(model.id, input_shapes={"input": [1, 3, 32, 32]})

    assert transport.lost == ["/v1/models", "/v1/jobs"] and len(sleeps) == 2
    upload_keys, submit_keys = transport.keys[:2], transport.keys[2:]
    assert len(set(upload_keys)) == len(set(submit_keys)) == 1 and upload_keys != submit_keys
    assert _count(db_session, Model, project) == 1
    assert _count(db_session, Job, project) == 1
    assert db_session.scalar(select(Job.id)) == uuid.UUID(job.id)
    assert broker.llen("cpu") == 1  # one Celery dispatch


def test_without_idempotent_posts_a_lost_answer_is_not_sent_again(
        client: TestClient, api_key: tuple[uuid.UUID, str], db_session: Session,
        tmp_path: Path) -> None:
    project, key = api_key
    path = tmp_path / "cnn.onnx"
    path.write_bytes(model_bytes(small_cnn()))
    transport = LosesFirstAnswers(client, lose={"/v1/models"})

    with FuseForgeClient("http://testserver", api_key=key, transport=transport,
                         idempotent_posts=False, sleep=lambda _: None) as fuseforge:
        with pytest.raises(ConnectionFailedError):
            fuseforge.upload_model(path)
    assert len(transport.keys) == 1
    assert _count(db_session, Model, project) == 1  # the server did it; the client cannot know
