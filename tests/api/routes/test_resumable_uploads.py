"""Model uploads in pieces over tus 1.0 (core, creation, termination, checksum): offsets held
to where the upload is, pieces checked against their checksums, the whole made a model once
(a repeat finds it again), and nothing left of a given-up upload."""

from __future__ import annotations

import base64
import hashlib
import uuid

from fastapi.testclient import TestClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from core.db.models import Model, ResumableUpload
from core.settings import Settings
from optimizer.testing.models import model_bytes, small_cnn

TUS = {"Tus-Resumable": "1.0.0"}


def _create(client: TestClient, length: int, filename: str = "cnn.onnx") -> str:
    answer = client.post("/v1/uploads", headers={
        **TUS, "Upload-Length": str(length),
        "Upload-Metadata": f"filename {base64.b64encode(filename.encode()).decode()}"})
    assert answer.status_code == 201, answer.text
    assert answer.headers["Tus-Resumable"] == "1.0.0"
    return answer.headers["Location"].rsplit("/", 1)[1]


def _patch(client: TestClient, upload: str, offset: int, data: bytes,
           checksum: bytes | None = None) -> tuple[int, dict[str, str], str]:
    headers = {**TUS, "Upload-Offset": str(offset),
               "Content-Type": "application/offset+octet-stream"}
    if checksum is not None:
        headers["Upload-Checksum"] = "sha256 " + base64.b64encode(checksum).decode()
    answer = client.patch(f"/v1/uploads/{upload}", content=data, headers=headers)
    return answer.status_code, dict(answer.headers), answer.text


def _offset(client: TestClient, upload: str) -> int:
    answer = client.head(f"/v1/uploads/{upload}", headers=TUS)
    assert answer.status_code == 200
    return int(answer.headers["Upload-Offset"])


def _pieces(settings: Settings) -> list[str]:
    folder = settings.artifacts_dir / "uploads"
    return sorted(p.name for p in folder.rglob("*") if p.is_file()) if folder.exists() else []


def test_options_say_what_the_server_speaks(client: TestClient, settings: Settings) -> None:
    answer = client.options("/v1/uploads")
    assert answer.status_code == 204
    assert answer.headers["Tus-Version"] == "1.0.0"
    assert set(answer.headers["Tus-Extension"].split(",")) == {
        "creation", "termination", "checksum"}
    assert answer.headers["Tus-Checksum-Algorithm"] == "sha256"
    assert int(answer.headers["Tus-Max-Size"]) == settings.max_upload_bytes


def test_pieces_sent_in_turn_become_the_model_and_a_repeat_finds_it(
        client: TestClient, db_session: Session, settings: Settings) -> None:
    data = model_bytes(small_cnn(seed=41))
    upload = _create(client, len(data))
    cut = len(data) // 3
    for start, end in ((0, cut), (cut, 2 * cut), (2 * cut, len(data))):
        piece = data[start:end]
        status, headers, text = _patch(client, upload, start, piece,
                                       hashlib.sha256(piece).digest())
        assert status == 204, text
        assert headers["upload-offset"] == str(end)
    assert _offset(client, upload) == len(data)

    made = client.post(f"/v1/models?upload_id={upload}")
    assert made.status_code == 201, made.text
    assert made.json()["sha256"] == hashlib.sha256(data).hexdigest()
    assert made.json()["name"] == "cnn.onnx"  # Upload-Metadata's filename
    assert _pieces(settings) == []  # the model's object holds the bytes now
    again = client.post(f"/v1/models?upload_id={upload}")
    assert (again.status_code, again.json()["id"]) == (200, made.json()["id"])
    assert db_session.scalar(select(func.count()).select_from(Model)) == 1


def test_a_piece_at_the_wrong_offset_is_409_and_changes_nothing(client: TestClient) -> None:
    upload = _create(client, 100)
    assert _patch(client, upload, 0, b"a" * 40)[0] == 204
    status, _, text = _patch(client, upload, 10, b"b" * 10)
    assert status == 409 and "it holds 40 bytes" in text
    assert _offset(client, upload) == 40


def test_a_piece_whose_checksum_does_not_match_is_460_and_not_kept(
        client: TestClient, settings: Settings) -> None:
    upload = _create(client, 100)
    status, _, text = _patch(client, upload, 0, b"a" * 40, hashlib.sha256(b"other").digest())
    assert status == 460 and "does not match its Upload-Checksum" in text
    assert _offset(client, upload) == 0 and _pieces(settings) == []


def test_a_piece_past_the_length_is_413(client: TestClient) -> None:
    upload = _create(client, 10)
    assert _patch(client, upload, 0, b"a" * 11)[0] == 413
    assert _offset(client, upload) == 0


def test_an_unfinished_upload_is_no_model_yet(client: TestClient) -> None:
    upload = _create(client, 100)
    _patch(client, upload, 0, b"a" * 40)
    made = client.post(f"/v1/models?upload_id={upload}")
    assert made.status_code == 409 and "holds 40 of its 100 bytes" in made.json()["detail"]


def test_a_whole_upload_that_is_no_model_is_422_like_any_upload(client: TestClient) -> None:
    upload = _create(client, 64)
    _patch(client, upload, 0, b"not a model".ljust(64, b"!"))
    made = client.post(f"/v1/models?upload_id={upload}")
    assert made.status_code == 422 and made.json()["error"] == "InvalidModelFile"


def test_termination_removes_the_upload_and_its_pieces(
        client: TestClient, db_session: Session, settings: Settings) -> None:
    upload = _create(client, 100)
    _patch(client, upload, 0, b"a" * 40)
    assert _pieces(settings)
    assert client.delete(f"/v1/uploads/{upload}", headers=TUS).status_code == 204
    assert client.head(f"/v1/uploads/{upload}", headers=TUS).status_code == 404
    assert _pieces(settings) == []
    assert db_session.scalar(select(func.count()).select_from(ResumableUpload)) == 0


def test_bad_headers_are_400_and_too_large_is_413(client: TestClient,
                                                  settings: Settings) -> None:
    assert client.post("/v1/uploads", headers=TUS).status_code == 400  # no Upload-Length
    too_long = client.post("/v1/uploads", headers={
        **TUS, "Upload-Length": str(settings.max_upload_bytes + 1)})
    assert too_long.status_code == 413 and "FUSEFORGE_MAX_UPLOAD_BYTES" in too_long.text
    upload = _create(client, 10)
    bad_sum = client.patch(f"/v1/uploads/{upload}", content=b"a", headers={
        **TUS, "Upload-Offset": "0", "Content-Type": "application/offset+octet-stream",
        "Upload-Checksum": "md5 AAAA"})
    assert bad_sum.status_code == 400 and "sha256" in bad_sum.text
    assert client.head(f"/v1/uploads/{uuid.uuid4()}", headers=TUS).status_code == 404
    assert client.head("/v1/uploads/not-an-id", headers=TUS).status_code == 404
