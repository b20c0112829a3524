"""`S3ArtifactStore`: artifacts in an S3-compatible bucket (AWS S3, SeaweedFS, MinIO, Ceph), so
the API and the workers need no shared disk.

Same `store://<key>` URIs and the same contract as `LocalArtifactStore`
(tests/core/test_artifact_stores.py):
- A put is atomic: S3 shows an object only once its upload (multipart above 8 MiB, aborted on
  failure) completes, so no reader ever sees part of one.
- The hash is computed while the file is read for upload, so it hashes the bytes sent.
- `local_path` downloads the object once into `cache_dir` (to a temporary name, then renamed),
  for code that needs a file (ONNX Runtime loads models from paths). Objects are never
  rewritten under a key, so the copy stays right; a delete removes it too.
A store that cannot be reached raises `ArtifactStoreUnavailable`, naming the endpoint and the
bucket.
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

import boto3
from boto3.exceptions import Boto3Error
from boto3.s3.transfer import TransferConfig
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from core.artifact_refs import URI_PREFIX, StoredObject, checked_key, key_of

if TYPE_CHECKING:
    from core.settings import S3StoreSettings

__all__ = ["ArtifactStoreUnavailable", "S3ArtifactStore"]

_PART_BYTES = 8 * 1024 * 1024
_DELETE_BATCH = 1000  # DeleteObjects' most keys per request
_TRANSFER = TransferConfig(multipart_threshold=_PART_BYTES, multipart_chunksize=_PART_BYTES,
                           max_concurrency=4, use_threads=True)
_MISSING = {"404", "NoSuchKey", "NotFound"}


class ArtifactStoreUnavailable(RuntimeError):
    """The object store did not answer, or refused a request it should take."""


class S3ArtifactStore:
    """Objects under `prefix` in `bucket`, through a boto3 S3 `client`."""

    def __init__(self, client: Any, bucket: str, *, prefix: str = "", cache_dir: Path,
                 describe: str | None = None) -> None:
        self._client = client
        self.bucket = bucket
        self.prefix = prefix
        self.cache_dir = cache_dir.resolve()
        self.describe = describe or f"s3://{bucket}/{prefix}"

    @classmethod
    def from_settings(cls, settings: S3StoreSettings, cache_dir: Path) -> S3ArtifactStore:
        secret = settings.secret_access_key
        client = boto3.session.Session().client(
            "s3", endpoint_url=settings.endpoint_url, region_name=settings.region,
            aws_access_key_id=settings.access_key_id,
            aws_secret_access_key=secret.get_secret_value() if secret else None,
            config=Config(s3={"addressing_style": settings.addressing_style},
                          connect_timeout=settings.connect_timeout_s,
                          read_timeout=settings.read_timeout_s,
                          retries={"max_attempts": 3, "mode": "standard"}))
        where = settings.endpoint_url or f"AWS S3 ({settings.region})"
        return cls(client, settings.bucket, prefix=settings.prefix, cache_dir=cache_dir,
                   describe=f"bucket {settings.bucket!r} at {where}")

    def put_file(self, source: Path, key: str) -> StoredObject:
        object_key = self._object_key(key)
        with source.open("rb") as file:
            hashed = _HashingReader(file)
            self._call("store", key, self._client.upload_fileobj, hashed, self.bucket,
                       object_key, Config=_TRANSFER)
        return StoredObject(uri=URI_PREFIX + key, sha256=hashed.digest.hexdigest(),
                            size_bytes=hashed.size)

    def move_in(self, source: Path, key: str) -> str:
        self._call("store", key, self._client.upload_file, str(source), self.bucket,
                   self._object_key(key), Config=_TRANSFER)
        source.unlink()
        return URI_PREFIX + key

    def open(self, uri: str) -> BinaryIO:
        key = key_of(uri)
        answer = self._call("read", key, self._client.get_object, Bucket=self.bucket,
                            Key=self._object_key(key))
        return io.BufferedReader(_BodyReader(answer["Body"]), buffer_size=1024 * 1024)

    def uri_for(self, key: str) -> str:
        self._object_key(key)  # the same refusals as put_file
        return URI_PREFIX + key

    def local_path(self, uri: str) -> Path:
        key = key_of(uri)
        path = self.cache_dir.joinpath(*checked_key(key).parts)
        if path.is_file():
            return path
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f".{path.name}.{uuid.uuid4().hex}.partial")
        try:
            self._call("read", key, self._client.download_file, self.bucket,
                       self._object_key(key), str(partial), Config=_TRANSFER)
            os.replace(partial, path)
        finally:
            partial.unlink(missing_ok=True)
        return path

    def exists(self, uri: str) -> bool:
        key = key_of(uri)
        try:
            self._client.head_object(Bucket=self.bucket, Key=self._object_key(key))
        except ClientError as err:
            if _code(err) in _MISSING:
                return False
            raise self._unavailable("look up", key, err) from err
        except BotoCoreError as err:
            raise self._unavailable("look up", key, err) from err
        return True

    def delete(self, uri: str) -> None:
        key = key_of(uri)
        self._call("delete", key, self._client.delete_object, Bucket=self.bucket,
                   Key=self._object_key(key))
        self.cache_dir.joinpath(*checked_key(key).parts).unlink(missing_ok=True)

    def delete_prefix(self, prefix: str) -> None:
        if not prefix.endswith("/"):
            raise ValueError(f"artifact prefix {prefix!r} must name a folder (end with '/')")
        folder = self._object_key(prefix.rstrip("/")) + "/"
        pages = self._client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=folder)
        try:
            keys = [item["Key"] for page in pages for item in page.get("Contents", [])]
        except (BotoCoreError, ClientError) as err:
            raise self._unavailable("list", prefix, err) from err
        for start in range(0, len(keys), _DELETE_BATCH):
            batch = [{"Key": key} for key in keys[start:start + _DELETE_BATCH]]
            answer = self._call("delete", prefix, self._client.delete_objects,
                                Bucket=self.bucket, Delete={"Objects": batch, "Quiet": True})
            if answer.get("Errors"):
                first = answer["Errors"][0]
                raise ArtifactStoreUnavailable(
                    f"The artifact store ({self.describe}) refused to delete "
                    f"{len(answer['Errors'])} objects under {prefix!r}, e.g. {first.get('Key')!r}: "
                    f"{first.get('Code')} {first.get('Message')}")
        shutil.rmtree(self.cache_dir.joinpath(*checked_key(prefix.rstrip("/")).parts),
                      ignore_errors=True)

    def _object_key(self, key: str) -> str:
        return self.prefix + checked_key(key).as_posix()

    def _call(self, action: str, key: str, method: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(*args, **kwargs)
        except ClientError as err:
            if _code(err) in _MISSING:
                raise FileNotFoundError(
                    f"No object {key!r} in the artifact store ({self.describe})") from err
            raise self._unavailable(action, key, err) from err
        except (BotoCoreError, Boto3Error) as err:  # no answer, or a transfer that gave up
            raise self._unavailable(action, key, err) from err

    def _unavailable(self, action: str, key: str, err: Exception) -> ArtifactStoreUnavailable:
        return ArtifactStoreUnavailable(
            f"The artifact store ({self.describe}) could not {action} {key!r}: {err}")


class _HashingReader(io.RawIOBase):
    """Reads `file` and hashes what it hands out (boto3 reads the parts in order)."""

    def __init__(self, file: BinaryIO) -> None:
        self._file = file
        self.digest = hashlib.sha256()
        self.size = 0

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        chunk = self._file.read(size)
        self.digest.update(chunk)
        self.size += len(chunk)
        return chunk

    def readinto(self, buffer: Any) -> int:
        chunk = self.read(len(buffer))
        buffer[:len(chunk)] = chunk
        return len(chunk)


class _BodyReader(io.RawIOBase):
    """A botocore StreamingBody as a raw binary stream (so io.BufferedReader can wrap it)."""

    def __init__(self, body: Any) -> None:
        self._body = body

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        chunk = self._body.read(len(buffer))
        buffer[:len(chunk)] = chunk
        return len(chunk)

    def close(self) -> None:
        self._body.close()
        super().close()


def _code(err: ClientError) -> str:
    return str(err.response.get("Error", {}).get("Code", ""))
