"""Uploading a model with its external data files as one tar archive: checked without reading
a weight, stored as one object, refused (422, nothing kept) where a name or a range would
reach outside the archive."""

from __future__ import annotations

import io
import subprocess
import tarfile
from collections.abc import Callable
from pathlib import Path

import onnx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from core.db.models import Model
from core.settings import Settings
from optimizer.model.archive import ArchiveReader
from optimizer.testing.external_data_models import DATA_FILE, saved_with_external_data
from tests.support.model_archives import archived


def _upload(client: TestClient, data: bytes, name: str = "model.tar") -> dict:
    response = client.post("/v1/models", files={"file": (name, data)})
    return {"status": response.status_code, **response.json()}


def _assert_nothing_stored(db_session: Session, settings: Settings) -> None:
    assert db_session.scalar(select(func.count()).select_from(Model)) == 0
    assert [p for p in settings.data_dir.rglob("*") if p.is_file()] == []


def _tar(members: list[tuple[tarfile.TarInfo, bytes | None]]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for info, data in members:
            if data is not None:
                info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return out.getvalue()


def _file(name: str, data: bytes) -> tuple[tarfile.TarInfo, bytes]:
    return tarfile.TarInfo(name), data


def _relocated(path: Path, location: str) -> bytes:
    """The .onnx file at `path` with every external tensor's location set to `location`."""
    model = onnx.load(path, load_external_data=False)
    for tensor in model.graph.initializer:
        for entry in tensor.external_data:
            if entry.key == "location":
                entry.value = location
    return model.SerializeToString()


def test_an_archive_of_a_model_and_its_data_is_one_model_with_its_files_listed(
        client: TestClient, tmp_path: Path, settings: Settings) -> None:
    model = onnx.load(saved_with_external_data(tmp_path), load_external_data=False)
    data = archived(tmp_path)
    body = _upload(client, data, "bert.tar")
    assert body["status"] == 201, body
    assert body["name"] == "model.onnx"  # the model's own file, not the archive's
    assert body["size_bytes"] == len(data)
    external = body["external_data"]
    assert external["model_file"] == "model.onnx"
    assert [(f["location"], f["size"]) for f in external["files"]] == [
        (DATA_FILE, (tmp_path / DATA_FILE).stat().st_size)]
    assert external["files"][0]["tensors"] == sum(
        t.data_location == onnx.TensorProto.EXTERNAL for t in model.graph.initializer) >= 2
    reader = ArchiveReader("x", lambda _name, _data: None)
    reader.feed(data)
    assert body["sha256"] == reader.finish().set_sha256
    stored = [p for p in settings.data_dir.rglob("*") if p.is_file()]
    assert [p.read_bytes() for p in stored] == [data]  # the archive itself, once


def test_the_same_files_archived_otherwise_are_the_same_model(
        client: TestClient, tmp_path: Path) -> None:
    saved_with_external_data(tmp_path)
    first = _upload(client, archived(tmp_path))
    gnu = tmp_path / "gnu.tar"  # another archiver, another order, owners and times
    subprocess.run(["tar", "--format=gnu", "-cf", str(gnu), "-C", str(tmp_path), DATA_FILE,
                    "model.onnx"], check=True)
    again = client.post("/v1/models", content=gnu.read_bytes(),
                        headers={"Content-Type": "application/octet-stream"})
    assert (first["status"], again.status_code) == (201, 200), again.text
    assert again.json()["id"] == first["id"]


def test_data_files_in_a_folder_beside_the_model_are_found(
        client: TestClient, tmp_path: Path) -> None:
    saved_with_external_data(tmp_path / "resnet", location="weights/all.bin")
    body = _upload(client, archived(tmp_path, ["resnet/model.onnx", "resnet/weights/all.bin"]))
    assert body["status"] == 201, body
    assert body["external_data"]["model_file"] == "resnet/model.onnx"
    assert [f["location"] for f in body["external_data"]["files"]] == ["weights/all.bin"]


def _model_and_data(tmp_path: Path) -> tuple[bytes, bytes]:
    path = saved_with_external_data(tmp_path)
    return path.read_bytes(), (tmp_path / DATA_FILE).read_bytes()


def _climbing(tmp_path: Path) -> bytes:
    model, data = _model_and_data(tmp_path)
    return _tar([_file("m/model.onnx", _relocated(tmp_path / "model.onnx", f"../{DATA_FILE}")),
                 _file(f"m/{DATA_FILE}", data)])


def _absolute(tmp_path: Path) -> bytes:
    _, data = _model_and_data(tmp_path)
    return _tar([_file("model.onnx", _relocated(tmp_path / "model.onnx", "/etc/passwd")),
                 _file(DATA_FILE, data)])


def _missing_data(tmp_path: Path) -> bytes:
    model, _ = _model_and_data(tmp_path)
    return _tar([_file("model.onnx", model)])


def _truncated_data(tmp_path: Path) -> bytes:
    model, data = _model_and_data(tmp_path)
    return _tar([_file("model.onnx", model), _file(DATA_FILE, data[:100])])


def _symlinked_data(tmp_path: Path) -> bytes:
    model, _ = _model_and_data(tmp_path)
    link = tarfile.TarInfo(DATA_FILE)
    link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
    return _tar([_file("model.onnx", model), (link, None)])


def _hard_linked_data(tmp_path: Path) -> bytes:
    model, _ = _model_and_data(tmp_path)
    link = tarfile.TarInfo(DATA_FILE)
    link.type, link.linkname = tarfile.LNKTYPE, "model.onnx"
    return _tar([_file("model.onnx", model), (link, None)])


def _climbing_member(tmp_path: Path) -> bytes:
    model, data = _model_and_data(tmp_path)
    return _tar([_file("model.onnx", model), _file(f"../{DATA_FILE}", data)])


def _two_models(tmp_path: Path) -> bytes:
    model, data = _model_and_data(tmp_path)
    return _tar([_file("model.onnx", model), _file("other.onnx", model), _file(DATA_FILE, data)])


def _no_model(tmp_path: Path) -> bytes:
    _, data = _model_and_data(tmp_path)
    return _tar([_file(DATA_FILE, data)])


def _unread_file(tmp_path: Path) -> bytes:
    model, data = _model_and_data(tmp_path)
    return _tar([_file("model.onnx", model), _file(DATA_FILE, data), _file("notes.txt", b"x")])


def _cut_short(tmp_path: Path) -> bytes:
    model, data = _model_and_data(tmp_path)
    whole = _tar([_file("model.onnx", model), _file(DATA_FILE, data)])
    return whole[:len(whole) // 2]


def _twice(tmp_path: Path) -> bytes:
    model, data = _model_and_data(tmp_path)
    return _tar([_file("model.onnx", model), _file(DATA_FILE, data), _file(DATA_FILE, data)])


@pytest.mark.parametrize(("make", "said"), [
    (_climbing, "not a path inside the model's folder"),
    (_absolute, "not a path inside the model's folder"),
    (_missing_data, "not beside the model"),
    (_truncated_data, "truncated"),
    (_symlinked_data, "which is a symlink"),
    (_hard_linked_data, "which is a hard link"),
    (_climbing_member, "not a path inside the archive"),
    (_two_models, "two .onnx files"),
    (_no_model, "holds no .onnx file"),
    (_unread_file, "no tensor of its model 'model.onnx' reads ('notes.txt')"),
    (_cut_short, "cut short"),
    (_twice, "twice"),
], ids=lambda value: getattr(value, "__name__", "")[1:] or None)
def test_an_archive_that_reaches_outside_itself_or_is_broken_is_422_and_nothing_is_kept(
        client: TestClient, db_session: Session, settings: Settings, tmp_path: Path,
        make: Callable[[Path], bytes], said: str) -> None:
    body = _upload(client, make(tmp_path / "model"))
    assert body["status"] == 422, body
    assert body["error"] == "InvalidModelFile"
    assert said in body["detail"]
    _assert_nothing_stored(db_session, settings)


def test_an_archive_over_the_upload_limit_is_413(
        client: TestClient, db_session: Session, settings: Settings, tmp_path: Path) -> None:
    saved_with_external_data(tmp_path)
    data = archived(tmp_path)
    settings.max_upload_bytes = len(data) - 1  # the set, not the .onnx file, is held to it
    body = _upload(client, data)
    assert body["status"] == 413, body
    assert "FUSEFORGE_MAX_UPLOAD_BYTES" in body["detail"]
    _assert_nothing_stored(db_session, settings)
