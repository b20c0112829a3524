"""Objects written as their bytes arrive (`ArtifactStore.open_writer`), held by every store: shown
whole at commit and never before, nothing left by an abort, abandoned writes removed; and the
S3 writer's bounded memory and backpressure, over a real SeaweedFS."""

from __future__ import annotations

import hashlib
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from core.artifact_refs import ArtifactStoreUnavailable
from core.object_store import S3ArtifactStore
from core.s3_writes import S3ObjectWriter
from core.storage import ArtifactStore
from tests.support.object_store import SeaweedS3

PART = 8 * 1024 * 1024


def _written(size: int, chunk: int = 65_536) -> list[bytes]:
    data = hashlib.sha256(b"seed").digest() * (size // 32 + 1)
    return [data[start:start + chunk] for start in range(0, size, chunk)]


def _unfinished_uploads(store: ArtifactStore, folder: str = "models") -> list[str]:
    """The multipart uploads S3 holds under `folder` (none for a local store)."""
    if not isinstance(store, S3ArtifactStore):
        return []
    answer = store._client.list_multipart_uploads(Bucket=store.bucket,
                                                  Prefix=f"{store.prefix}{folder}/")
    return [upload["Key"] for upload in answer.get("Uploads", [])]


def _leftover_files(store: ArtifactStore, folder: str = "models") -> list[str]:
    """The files the local store keeps under `folder` besides its objects (partial writes)."""
    root = getattr(store, "root", None)
    if root is None or not (root / folder).is_dir():
        return []
    objects = {item.name for item in store.list_folder(folder)}
    return sorted(path.name for path in (root / folder).iterdir() if path.name not in objects)


def _eventually(check: Any, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


@pytest.mark.parametrize("size", [0, 1000, 2 * PART + 12_345], ids=["empty", "one-put", "parts"])
def test_a_written_object_is_hidden_until_committed_then_whole(store: ArtifactStore,
                                                                size: int) -> None:
    chunks = _written(size)
    writer = store.open_writer("models/m.onnx")
    for chunk in chunks:
        writer.write(chunk)

    assert not store.exists(store.uri_for("models/m.onnx"))
    assert store.list_folder("models") == []  # a write in progress is no object
    uri = writer.commit()

    assert uri == "store://models/m.onnx" and store.exists(uri)
    with store.open(uri) as read:
        assert read.read() == b"".join(chunks)
    assert [item.name for item in store.list_folder("models")] == ["m.onnx"]
    assert _unfinished_uploads(store) == [] and _leftover_files(store) == []
    writer.abort()  # once committed: nothing happens
    assert store.exists(uri)


@pytest.mark.parametrize("size", [1000, 3 * PART], ids=["one-put", "parts"])
def test_an_aborted_write_leaves_nothing(store: ArtifactStore, size: int) -> None:
    writer = store.open_writer("models/m.onnx")
    for chunk in _written(size):
        writer.write(chunk)

    writer.abort()

    assert not store.exists(store.uri_for("models/m.onnx"))
    assert _eventually(lambda: _unfinished_uploads(store) == [])  # the abort is in the background
    assert _leftover_files(store) == []
    with pytest.raises(ValueError, match="is over"):
        writer.write(b"more")
    with pytest.raises(ValueError, match="is over"):
        writer.commit()


def test_an_abandoned_write_is_removed_and_a_live_one_spared(store: ArtifactStore) -> None:
    abandoned, live = store.open_writer("models/dead.onnx"), store.open_writer("models/live.onnx")
    for writer in (abandoned, live):
        for chunk in _written(PART + 1000):  # S3: one part sent, a multipart upload begun
            writer.write(chunk)
    s3 = isinstance(store, S3ArtifactStore)
    assert _eventually(lambda: _parts_sent(store, "models/dead.onnx") == (1 if s3 else 0))

    assert store.remove_abandoned_writes("models", older_than=time.time() - 300) == []
    time.sleep(2.5)  # S3 keeps whole seconds
    live.write(b"x" * PART)  # S3: a second part; local: a newer write
    assert _eventually(lambda: _parts_sent(store, "models/live.onnx") == (2 if s3 else 0))

    removed = store.remove_abandoned_writes("models", older_than=time.time() - 1.5)

    assert removed == ["models/dead.onnx"]
    assert not any("dead" in name for name in _leftover_files(store) + _unfinished_uploads(store))
    assert store.uri_for("models/live.onnx") == live.commit()
    assert _unfinished_uploads(store) == [] and _leftover_files(store) == []


@pytest.mark.parametrize("size", [PART + 1000, 2 * PART], ids=["short-last-part", "whole-parts"])
def test_a_write_kept_fresh_while_checked_is_spared_and_commits_whole(store: ArtifactStore,
                                                                      size: int) -> None:
    chunks = _written(size)
    writer = store.open_writer("models/checked.onnx")
    for chunk in chunks:
        writer.write(chunk)
    time.sleep(2.5)  # the model check: no byte arrives (S3 keeps whole seconds)

    writer.keep_fresh()  # S3: the short last part sent now, or the last part sent again
    writer.keep_fresh()  # and again, as the refresher does until the check ends
    assert _parts_sent(store, "models/checked.onnx") == (
        2 if isinstance(store, S3ArtifactStore) else 0)
    assert store.remove_abandoned_writes("models", older_than=time.time() - 1.5) == []
    with pytest.raises(ValueError, match="marked complete"):
        writer.write(b"late")

    uri = writer.commit()
    with store.open(uri) as read:
        assert read.read() == b"".join(chunks)
    assert _unfinished_uploads(store) == [] and _leftover_files(store) == []


def _parts_sent(store: ArtifactStore, key: str) -> int:
    """How many parts (part numbers: a part sent again counts once) of the multipart upload of
    `key` S3 holds (0 for a local store)."""
    if not isinstance(store, S3ArtifactStore):
        return 0
    uploads = store._client.list_multipart_uploads(Bucket=store.bucket,
                                                   Prefix=store.prefix + key)
    return sum(len({part["PartNumber"] for part in store._client.list_parts(
        Bucket=store.bucket, Key=upload["Key"], UploadId=upload["UploadId"]).get("Parts", [])})
        for upload in uploads.get("Uploads", []))


def test_the_s3_writer_holds_at_most_its_parts_in_flight_and_makes_its_caller_wait(
        seaweed: SeaweedS3, tmp_path: Path) -> None:
    seaweed.create_bucket("slow")
    store = S3ArtifactStore.from_settings(seaweed.settings("slow"), tmp_path / "cache")
    let_go = threading.Event()
    sending = 0
    most_sending = 0
    lock = threading.Lock()

    def slow_call(action: str, key: str, method: Any, *args: Any, **kwargs: Any) -> Any:
        nonlocal sending, most_sending
        if getattr(method, "__name__", "") != "upload_part":
            return store._call(action, key, method, *args, **kwargs)
        with lock:
            sending += 1
            most_sending = max(most_sending, sending)
        let_go.wait(30)  # a store that is behind
        try:
            return store._call(action, key, method, *args, **kwargs)
        finally:
            with lock:
                sending -= 1

    writer = S3ObjectWriter(call=slow_call, client=store._client, bucket="slow",
                            object_key="models/m.onnx", key="models/m.onnx",
                            describe=store.describe, part_bytes=PART, parts_in_flight=3)
    chunks = _written(6 * PART)
    written = 0
    while writer.room() is None and written < len(chunks):
        writer.write(chunks[written])
        written += 1

    room = writer.room()
    assert room is not None and not room.done()  # three parts sent, none answered: wait
    assert written * 65_536 <= 4 * PART  # the parts in flight and one being filled, no more
    let_go.set()
    room.result(timeout=30)
    for chunk in chunks[written:]:
        writer.write(chunk)  # a caller that does not wait for room blocks in write instead
    uri = writer.commit()

    assert most_sending <= 3
    with store.open(uri) as read:
        assert hashlib.sha256(read.read()).digest() == hashlib.sha256(b"".join(chunks)).digest()


def test_a_failed_part_fails_the_write_and_stores_nothing(seaweed: SeaweedS3,
                                                          tmp_path: Path) -> None:
    bucket = f"failing-{uuid.uuid4().hex[:8]}"
    seaweed.create_bucket(bucket)
    store = S3ArtifactStore.from_settings(seaweed.settings(bucket), tmp_path / "cache")

    def failing_call(action: str, key: str, method: Any, *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("PartNumber") == 2:
            raise ArtifactStoreUnavailable("the artifact store (a test's) went away")
        return store._call(action, key, method, *args, **kwargs)

    writer = S3ObjectWriter(call=failing_call, client=store._client, bucket=bucket,
                            object_key="models/m.onnx", key="models/m.onnx",
                            describe=store.describe)
    for chunk in _written(3 * PART):
        writer.write(chunk)

    with pytest.raises(ArtifactStoreUnavailable, match="went away"):
        writer.commit()
    assert not store.exists(store.uri_for("models/m.onnx"))
    assert _eventually(lambda: _unfinished_uploads(store) == [])
