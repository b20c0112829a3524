"""The ArtifactStore contract, held by every store: the local folder and S3 (a real SeaweedFS;
the `store` fixture is in conftest.py)."""

from __future__ import annotations

import hashlib
import os
import threading
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest

from core.artifact_refs import ArtifactStoreUnavailable, CopyCancelled
from core.object_store import S3ArtifactStore, trim_cache
from core.storage import ArtifactStore, LocalArtifactStore
from tests.support.object_store import SeaweedS3


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


def test_a_copied_in_file_is_stored_and_its_source_kept(store: ArtifactStore,
                                                         tmp_path: Path) -> None:
    source = _file(tmp_path, b"weights")

    uri = store.copy_in(source, "models/m.onnx")

    assert uri == "store://models/m.onnx" and source.read_bytes() == b"weights"
    source.unlink()  # the stored copy does not depend on it
    with store.open(uri) as read:
        assert read.read() == b"weights"


def test_a_cancelled_copy_stores_nothing(seaweed: SeaweedS3, tmp_path: Path) -> None:
    seaweed.create_bucket("cancelled")
    store = S3ArtifactStore.from_settings(seaweed.settings("cancelled"), tmp_path / "cache")
    source = _file(tmp_path, bytes(40 * 2**20))  # multipart

    class SetOnceSending(threading.Event):
        """Not set when the copy starts; set by the time its first bytes are sent."""

        asked = 0

        def is_set(self) -> bool:
            self.asked += 1
            return self.asked > 1

    cancelled = SetOnceSending()

    with pytest.raises(CopyCancelled):
        store.copy_in(source, "models/m.onnx", cancelled=cancelled)

    assert cancelled.asked >= 2  # stopped mid-transfer, not before it began
    assert not store.exists(store.uri_for("models/m.onnx"))
    assert seaweed.client().list_multipart_uploads(Bucket="cancelled").get("Uploads", []) == []


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


def test_a_folder_lists_its_own_objects_with_their_age_and_its_subfolders(
        store: ArtifactStore, tmp_path: Path) -> None:
    before = time.time()
    for key in ("models/a.onnx", "models/b.onnx", "jobs/j1/engine.onnx", "jobs/j2/plot.svg",
                "jobs/j2/nested/deep.bin"):
        store.put_file(_file(tmp_path, key.encode()), key)

    listed = sorted(store.list_folder("models"), key=lambda item: item.name)

    assert [(item.name, item.uri) for item in listed] == [
        ("a.onnx", "store://models/a.onnx"), ("b.onnx", "store://models/b.onnx")]
    # S3 keeps whole seconds; both clocks are this machine's
    assert all(before - 2 <= item.modified_at <= time.time() + 2 for item in listed)
    assert sorted(store.list_subfolders("jobs")) == ["j1", "j2"]
    assert store.list_folder("jobs") == [] and store.list_folder("nothing-here") == []
    assert store.list_subfolders("models") == []


def test_a_ready_store_answers_its_check(store: ArtifactStore) -> None:
    store.ensure_ready()
    assert store.ensure_ready() is False  # already there: nothing made

    store.check()  # no error


def test_the_s3_store_makes_its_missing_bucket_once(seaweed: SeaweedS3, tmp_path: Path) -> None:
    bucket = f"made-{uuid.uuid4().hex[:12]}"
    store = S3ArtifactStore.from_settings(seaweed.settings(bucket), tmp_path / "cache")
    with pytest.raises(ArtifactStoreUnavailable, match="no such bucket: `fuseforge migrate`"):
        store.check()

    assert store.ensure_ready() is True and store.ensure_ready() is False
    store.check()
    assert bucket in [b["Name"] for b in seaweed.client().list_buckets()["Buckets"]]


def test_the_local_store_hands_out_no_url_and_the_s3_store_a_presigned_one(
        seaweed: SeaweedS3, tmp_path: Path) -> None:
    local = LocalArtifactStore(tmp_path / "artifacts")
    assert local.download_url("store://jobs/1/e.onnx", filename="e.onnx",
                              media_type="application/octet-stream") is None
    seaweed.create_bucket("signed")
    store = S3ArtifactStore.from_settings(seaweed.settings("signed"), tmp_path / "cache")
    stored = store.put_file(_file(tmp_path, b"engine bytes"), "jobs/1/engine.onnx")

    url = store.download_url(stored.uri, filename="engine.onnx", media_type="image/svg+xml")

    assert url is not None and url.startswith(f"{seaweed.endpoint_url}/signed/jobs/1/engine.onnx?")
    with urllib.request.urlopen(url, timeout=10) as answer:  # no credentials but the URL's
        assert answer.read() == b"engine bytes"
        assert answer.headers["Content-Disposition"] == 'attachment; filename="engine.onnx"'
        assert answer.headers["Content-Type"] == "image/svg+xml"
    tampered = url.replace("engine.onnx?", "plot.svg?", 1)  # the signature covers the key
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(tampered, timeout=10)
    assert refused.value.code == 403


def test_presigned_urls_name_the_public_address_and_can_be_turned_off(
        seaweed: SeaweedS3, tmp_path: Path) -> None:
    settings = seaweed.settings("signed").model_copy(
        update={"public_endpoint_url": "https://objects.example.com", "presigned_url_ttl_s": 60})
    url = S3ArtifactStore.from_settings(settings, tmp_path / "c").download_url(
        "store://jobs/1/e.onnx", filename="e.onnx", media_type="application/octet-stream")
    assert url is not None and url.startswith("https://objects.example.com/signed/jobs/1/e.onnx?")
    assert "X-Amz-Expires=60" in url

    off = settings.model_copy(update={"presigned_downloads": False})
    assert S3ArtifactStore.from_settings(off, tmp_path / "c").download_url(
        "store://jobs/1/e.onnx", filename="e.onnx", media_type="application/octet-stream") is None


def test_the_s3_store_keeps_its_objects_under_its_prefix(seaweed: SeaweedS3,
                                                         tmp_path: Path) -> None:
    seaweed.create_bucket("prefixed")
    store = S3ArtifactStore.from_settings(seaweed.settings("prefixed", prefix="team-a/"),
                                          tmp_path / "cache")
    store.put_file(_file(tmp_path, b"x"), "models/m.onnx")

    listed = seaweed.client().list_objects_v2(Bucket="prefixed")
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
    with pytest.raises(ArtifactStoreUnavailable, match="could not reach"):
        store.check()
    with pytest.raises(ArtifactStoreUnavailable, match="could not list 'models'"):
        store.list_folder("models")


def test_the_object_cache_lets_the_least_recently_used_copies_go_past_its_limit(
        seaweed: SeaweedS3, tmp_path: Path) -> None:
    seaweed.create_bucket("cached")
    settings = seaweed.settings("cached").model_copy(update={"cache_max_bytes": 2500})
    store = S3ArtifactStore.from_settings(settings, tmp_path / "cache")
    uris = [store.put_file(_file(tmp_path, bytes(1000)), f"models/{n}.onnx").uri
            for n in ("old", "used", "new")]
    old, used = store.local_path(uris[0]), store.local_path(uris[1])
    hours_ago = time.time() - 2 * 3600
    for path in (old, used):
        os.utime(path, (hours_ago, hours_ago))
    assert store.local_path(uris[1]) == used  # a hit marks it used now

    new = store.local_path(uris[2])  # 3000 bytes: over the limit, so the oldest goes

    assert not old.exists() and used.exists() and new.exists()
    assert store.local_path(uris[0]).read_bytes() == bytes(1000)  # fetched again when needed


def test_copies_used_within_the_hour_stay_even_past_the_limit(tmp_path: Path) -> None:
    for name in ("a", "b"):
        (tmp_path / name).write_bytes(bytes(1000))

    assert trim_cache(tmp_path, max_bytes=0) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b"]
