"""A project's storage quota (FUSEFORGE_QUOTA__PROJECT_BYTES): an upload that would pass it is
refused with 413 naming the bytes used and the limit, cut off while it streams, leaving no file
and no row; uploads and kept artifacts count, deletes and expired artifacts free room."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from api.services.errors import QuotaExceeded
from api.services.uploads.quota import UploadRoom, project_usage_bytes
from api.services.uploads.receive import receive_upload
from core.db.models import Artifact, Dataset, Model
from core.db.types import utc_now
from core.settings import Settings
from optimizer.testing.models import model_bytes, small_cnn
from tests.support.api_keys import bearer, new_key
from tests.support.npz_files import npz_bytes

CNN = model_bytes(small_cnn(seed=5))
OTHER_CNN = model_bytes(small_cnn(seed=6))
DATA = npz_bytes(input=np.zeros((2, 1, 3, 32, 32), np.float32))


def _files(settings: Settings) -> list[Path]:
    return sorted(p for p in settings.data_dir.rglob("*") if p.is_file())


def _rows(db_session: Session) -> int:
    return sum(db_session.scalar(select(func.count()).select_from(table)) or 0
               for table in (Model, Dataset))


def _upload(client: TestClient, data: bytes, route: str = "/v1/models",
            name: str = "m.onnx", **headers: str) -> Any:
    return client.post(route, files={"file": (name, data)}, headers=headers)


def test_an_upload_past_the_quota_is_413_naming_use_and_limit_and_leaves_nothing(
        client: TestClient, db_session: Session, settings: Settings) -> None:
    settings.quota.project_bytes = len(CNN) + 1000
    assert _upload(client, CNN).status_code == 201
    files_before, rows_before = _files(settings), _rows(db_session)

    for route, data in (("/v1/models", OTHER_CNN), ("/v1/datasets", DATA)):
        response = _upload(client, data, route)
        assert response.status_code == 413, response.text
        assert response.json()["error"] == "QuotaExceeded"
        detail = response.json()["detail"]
        assert f"uses {len(CNN)} of its {len(CNN) + 1000} bytes" in detail
        assert "FUSEFORGE_QUOTA__PROJECT_BYTES" in detail and "DELETE" in detail

    assert _files(settings) == files_before and _rows(db_session) == rows_before


def test_a_chunked_upload_past_the_quota_is_cut_off_while_streaming(
        client: TestClient, db_session: Session, settings: Settings) -> None:
    settings.quota.project_bytes = 64 * 1024

    def body():  # no Content-Length: the quota must hold while bytes arrive
        for _ in range(64):
            yield b"\0" * 16 * 1024

    response = client.post("/v1/models", content=body(),
                           headers={"Content-Type": "application/octet-stream"})
    assert response.status_code == 413, response.text
    assert response.json()["error"] == "QuotaExceeded"
    assert _files(settings) == [] and _rows(db_session) == 0


def test_receiving_stops_reading_once_past_the_room_left(tmp_path: Path) -> None:
    pulled = 0

    async def chunks() -> AsyncIterator[bytes]:
        nonlocal pulled
        for _ in range(100):
            pulled += 1
            yield b"\0" * 1024

    async def receive() -> None:
        await receive_upload(chunks=chunks(), content_type="application/octet-stream",
                             content_length=None, temp_dir=tmp_path, max_bytes=10**9,
                             quota=UploadRoom(used_bytes=1000, limit_bytes=1000 + 4 * 1024))

    with pytest.raises(QuotaExceeded, match="uses 1000 of its 5096 bytes"):
        asyncio.run(receive())
    assert pulled == 5  # the fifth chunk passes the 4 KiB left: nothing more is read
    assert list(tmp_path.iterdir()) == []


def test_deleting_frees_room_for_the_next_upload(client: TestClient, settings: Settings) -> None:
    settings.quota.project_bytes = len(CNN) + len(OTHER_CNN) // 2
    first = _upload(client, CNN).json()
    assert _upload(client, OTHER_CNN).status_code == 413

    assert client.delete(f"/v1/models/{first['id']}").status_code == 204

    assert _upload(client, OTHER_CNN).status_code == 201


def test_kept_artifacts_count_and_expired_ones_do_not(
        client: TestClient, db_session: Session, settings: Settings,
        api_key: tuple[uuid.UUID, str]) -> None:
    project = api_key[0]
    model = _upload(client, CNN).json()
    job = client.post("/v1/jobs", json={"model_id": model["id"]}).json()
    artifact = Artifact(job_id=uuid.UUID(job["id"]), name="engine.onnx", kind="engine",
                        uri=f"store://jobs/{job['id']}/engine.onnx", sha256="0" * 64,
                        size_bytes=10_000)
    db_session.add(artifact)
    db_session.commit()
    assert project_usage_bytes(db_session, project) == len(CNN) + 10_000
    settings.quota.project_bytes = len(CNN) + 10_000 + len(DATA) - 1  # one byte short
    assert _upload(client, DATA, "/v1/datasets", "d.npz").status_code == 413

    artifact.expired_at = utc_now()  # retention removed its file
    db_session.commit()

    assert project_usage_bytes(db_session, project) == len(CNN)
    assert _upload(client, DATA, "/v1/datasets", "d.npz").status_code == 201
    assert project_usage_bytes(db_session, project) == len(CNN) + len(DATA)


def test_each_project_is_charged_its_own_uploads(
        client: TestClient, db_session: Session, settings: Settings) -> None:
    settings.quota.project_bytes = len(CNN) + 1000
    other = bearer(new_key(db_session, settings)[1])
    assert _upload(client, CNN).status_code == 201

    assert _upload(client, CNN, **other).status_code == 201  # the same bytes: its own charge
    assert _upload(client, OTHER_CNN, **other).status_code == 413
