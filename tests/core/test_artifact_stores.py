"""The ArtifactStore contract, held by every store: the local folder and S3 (a real SeaweedFS)."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from core.object_store import ArtifactStoreUnavailable, S3ArtifactStore
from core.storage import ArtifactStore, LocalArtifactStore
from tests.support.object_store import SeaweedS3, seaweed_s3


@pytest.fixture(scope="module")
def seaweed() -> Iterator[SeaweedS3]:
    with seaweed_s3() as server:
        yield server


@pytest.fixture(params=["local", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> ArtifactStore:
    if request.param == "local":
        return LocalArtifactStore(tmp_path / "artifacts")
    seaweed: SeaweedS3 = request.getfixturevalue("seaweed")
    bucket = f"contract-{uuid.uuid4().hex[:12]}"
    seaweed.create_bucket(bucket)
    return S3ArtifactStore.from_settings(seaweed.settings(bucket, prefix="ff/"),
                                         tmp_path / "cache")


def _file(tmp_path: Path, data: bytes, name: str = "source.bin") -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


def test_a_put_returns_the_uri_hash_and_size_and_the_object_reads_back(
        store: ArtifactStore, tmp_path: Path) -> None:
    data = bytes(range(256)) * 70_000  # 17.9 MB: three multipart parts in S3
    stored = store.put_file(_file(tmp_path, data), "jobs/1/engine.onnx")

    assert stored.uri == "store://jobs/1/engine.onnx" == store.uri_for("jobs/1/engine.onnx")
    assert stored.sha256 == hashlib.sha256(data).hexdigest() and stored.size_bytes == len(data)
    assert store.exists(stored.uri)
    with store.open(stored.uri) as read:
        assert read.read() == data
    assert store.local_path(stored.uri).read_bytes() == data


def test_a_moved_in_file_is_stored_and_leaves_its_source(store: ArtifactStore,
                                                          tmp_path: Path) -> None:
    source = _file(tmp_path, b"weights")

    uri = store.move_in(source, "models/m.onnx")

    assert not source.exists()
    with store.open(uri) as read:
        assert read.read() == b"weights"


def test_a_missing_object_does_not_exist_and_its_delete_is_no_error(
        store: ArtifactStore) -> None:
    uri = store.uri_for("jobs/none/engine.onnx")

    assert not store.exists(uri)
    store.delete(uri)  # deletes are retried after failures: a second one must pass
    with pytest.raises(FileNotFoundError):
        store.open(uri)


def test_a_delete_removes_the_object_and_its_local_copy(store: ArtifactStore,
                                                        tmp_path: Path) -> None:
    uri = store.put_file(_file(tmp_path, b"x" * 10), "jobs/2/report.json").uri
    local = store.local_path(uri)

    store.delete(uri)

    assert not store.exists(uri) and not local.exists()


def test_a_prefix_delete_removes_that_folder_only(store: ArtifactStore, tmp_path: Path) -> None:
    source = _file(tmp_path, b"data")
    inside = [store.put_file(source, f"jobs/3/{name}").uri for name in ("a", "b", "deep/c")]
    beside = store.put_file(source, "jobs/33/a").uri  # shares the prefix "jobs/3" as text

    store.delete_prefix("jobs/3/")

    assert not any(store.exists(uri) for uri in inside) and store.exists(beside)
    with pytest.raises(ValueError, match="must name a folder"):
        store.delete_prefix("jobs/33")


@pytest.mark.parametrize("key", ["/etc/passwd", "../outside", "a/../../b", ""])
def test_keys_outside_the_store_are_refused(store: ArtifactStore, tmp_path: Path,
                                            key: str) -> None:
    with pytest.raises(ValueError, match="relative path"):
        store.put_file(_file(tmp_path, b"x"), key)
    with pytest.raises(ValueError, match="relative path"):
        store.uri_for(key)


def test_a_put_whose_source_fails_stores_nothing(store: ArtifactStore, tmp_path: Path) -> None:
    with pytest.raises(OSError):
        store.put_file(tmp_path / "never-written.bin", "jobs/4/engine.onnx")

    assert not store.exists(store.uri_for("jobs/4/engine.onnx"))


def test_the_s3_store_keeps_its_objects_under_its_prefix(seaweed: SeaweedS3,
                                                         tmp_path: Path) -> None:
    seaweed.create_bucket("prefixed")
    store = S3ArtifactStore.from_settings(seaweed.settings("prefixed", prefix="team-a/"),
                                          tmp_path / "cache")
    store.put_file(_file(tmp_path, b"x"), "models/m.onnx")

    listed = seaweed.client().list_objects_v2(Bucket="prefixed")  # type: ignore[attr-defined]
    assert [item["Key"] for item in listed["Contents"]] == ["team-a/models/m.onnx"]


def test_the_s3_store_refuses_wrong_credentials_naming_the_bucket(seaweed: SeaweedS3,
                                                                  tmp_path: Path) -> None:
    seaweed.create_bucket("guarded")
    settings = seaweed.settings("guarded").model_copy(update={"access_key_id": "intruder"})
    store = S3ArtifactStore.from_settings(settings, tmp_path / "cache")

    with pytest.raises(ArtifactStoreUnavailable, match=r"bucket 'guarded' at http://127\.0\.0\.1"):
        store.put_file(_file(tmp_path, b"x"), "models/m.onnx")


def test_an_unreachable_s3_store_is_unavailable_not_missing(seaweed: SeaweedS3,
                                                            tmp_path: Path) -> None:
    settings = seaweed.settings("any").model_copy(
        update={"endpoint_url": "http://127.0.0.1:9"})  # nothing listens on the discard port
    store = S3ArtifactStore.from_settings(settings, tmp_path / "cache")

    with pytest.raises(ArtifactStoreUnavailable, match="could not look up 'models/m.onnx'"):
        store.exists(store.uri_for("models/m.onnx"))
    with pytest.raises(ArtifactStoreUnavailable, match="could not store"):
        store.put_file(_file(tmp_path, b"x"), "models/m.onnx")
