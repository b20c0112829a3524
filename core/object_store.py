"""`S3ArtifactStore`: artifacts in an S3-compatible bucket (AWS S3, SeaweedFS, MinIO, Ceph), so
the API and the workers need no shared disk.

Same `store://<key>` URIs and the same contract as `LocalArtifactStore`
(tests/core/test_artifact_stores.py):
- A put is atomic: S3 shows an object only once its upload (multipart above 8 MiB, aborted on
  failure) completes, so no reader ever sees part of one.
- The hash is computed while the file is read for upload, so it hashes the bytes sent.
- `local_path` downloads the object once into `cache_dir` (to a temporary name, then renamed),
  for code that needs a file (ONNX Runtime loads models from paths). Objects are never
  rewritten under a key, so the copy stays right; a delete removes it too. The cache is kept
  under `cache_max_bytes`, least recently used out first (never a copy used in the last hour).
- `download_url` presigns a GET (with the file name and media type the API would have sent)
  against `public_endpoint_url`, so a download goes from the store to the client directly.
A store that cannot be reached raises `ArtifactStoreUnavailable`, naming the endpoint and the
bucket.
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import threading
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

import boto3
from boto3.exceptions import Boto3Error
from boto3.s3.transfer import TransferConfig
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from core.artifact_refs import (
    URI_PREFIX,
    ArtifactStoreUnavailable,
    CopyCancelled,
    ListedObject,
    StoredObject,
    attachment_disposition,
    checked_key,
    key_of,
)
from core.s3_writes import PART_BYTES, S3ObjectWriter

if TYPE_CHECKING:
    from core.settings import S3StoreSettings

__all__ = ["ArtifactStoreUnavailable", "S3ArtifactStore", "trim_cache"]

_DELETE_BATCH = 1000  # DeleteObjects' most keys per request
_TRANSFER = TransferConfig(multipart_threshold=PART_BYTES, multipart_chunksize=PART_BYTES,
                           max_concurrency=4, use_threads=True)
_MISSING = {"404", "NoSuchKey", "NotFound"}
_IN_USE_S = 3600.0


class S3ArtifactStore:
    """Objects under `prefix` in `bucket`, through a boto3 S3 `client`."""

    def __init__(self, client: Any, bucket: str, *, prefix: str = "", cache_dir: Path,
                 describe: str | None = None, signer: Any = None,
                 presigned_url_ttl_s: int | None = None, region: str = "us-east-1",
                 cache_max_bytes: int | None = None) -> None:
        self._client = client
        self._signer = signer or client  # presigns downloads: a client for the public address
        self._presigned_url_ttl_s = presigned_url_ttl_s  # None: no presigned downloads
        self.bucket = bucket
        self.prefix = prefix
        self.region = region
        self.cache_dir = cache_dir.resolve()
        self.cache_max_bytes = cache_max_bytes  # None: no limit
        self.describe = describe or f"s3://{bucket}/{prefix}"

    @classmethod
    def from_settings(cls, settings: S3StoreSettings, cache_dir: Path) -> S3ArtifactStore:
        session = boto3.session.Session()
        secret = settings.secret_access_key

        def client(endpoint_url: str | None) -> Any:
            return session.client(
                "s3", endpoint_url=endpoint_url, region_name=settings.region,
                aws_access_key_id=settings.access_key_id,
                aws_secret_access_key=secret.get_secret_value() if secret else None,
                config=Config(s3={"addressing_style": settings.addressing_style},
                              signature_version="s3v4",
                              connect_timeout=settings.connect_timeout_s,
                              read_timeout=settings.read_timeout_s,
                              retries={"max_attempts": 3, "mode": "standard"}))

        inside = client(settings.endpoint_url)
        public = settings.public_endpoint_url
        where = settings.endpoint_url or f"AWS S3 ({settings.region})"
        return cls(inside, settings.bucket, prefix=settings.prefix, cache_dir=cache_dir,
                   describe=f"bucket {settings.bucket!r} at {where}",
                   signer=client(public) if public and public != settings.endpoint_url else inside,
                   presigned_url_ttl_s=(settings.presigned_url_ttl_s
                                        if settings.presigned_downloads else None),
                   region=settings.region, cache_max_bytes=settings.cache_max_bytes)

    def check(self) -> None:
        """Raise ArtifactStoreUnavailable unless the bucket answers (health checks)."""
        if not self._bucket_exists():
            raise ArtifactStoreUnavailable(
                f"The artifact store ({self.describe}) has no such bucket: `fuseforge migrate` "
                "creates it")

    def ensure_ready(self) -> bool:
        """Create the bucket where it is missing (`fuseforge migrate`); True if it did."""
        if self._bucket_exists():
            return False
        # AWS refuses a LocationConstraint of us-east-1 (its default) and needs one elsewhere.
        where = ({} if self.region == "us-east-1"
                 else {"CreateBucketConfiguration": {"LocationConstraint": self.region}})
        self._call("create the bucket", "", self._client.create_bucket, Bucket=self.bucket, **where)
        return True

    def _bucket_exists(self) -> bool:
        try:
            self._client.head_bucket(Bucket=self.bucket)
        except ClientError as err:
            if _code(err) in _MISSING:
                return False
            raise self._unavailable("reach the bucket", "", err) from err
        except BotoCoreError as err:
            raise self._unavailable("reach the bucket", "", err) from err
        return True

    def download_url(self, uri: str, *, filename: str, media_type: str) -> str | None:
        if self._presigned_url_ttl_s is None:
            return None
        key = key_of(uri)
        return str(self._signer.generate_presigned_url(
            "get_object", ExpiresIn=self._presigned_url_ttl_s,
            Params={"Bucket": self.bucket, "Key": self._object_key(key),
                    "ResponseContentType": media_type,
                    "ResponseContentDisposition": attachment_disposition(filename)}))

    def list_folder(self, folder: str) -> list[ListedObject]:
        prefix = self._folder(folder)
        return [ListedObject(uri=URI_PREFIX + item["Key"].removeprefix(self.prefix),
                             name=item["Key"].removeprefix(prefix),
                             modified_at=item["LastModified"].timestamp())
                for page in self._pages(folder, prefix, delimiter="/")
                for item in page.get("Contents", [])]

    def list_subfolders(self, folder: str) -> list[str]:
        prefix = self._folder(folder)
        return [entry["Prefix"].removeprefix(prefix).rstrip("/")
                for page in self._pages(folder, prefix, delimiter="/")
                for entry in page.get("CommonPrefixes", [])]

    def put_file(self, source: Path, key: str) -> StoredObject:
        object_key = self._object_key(key)
        with source.open("rb") as file:
            hashed = _HashingReader(file)
            self._call("store", key, self._client.upload_fileobj, hashed, self.bucket,
                       object_key, Config=_TRANSFER)
        return StoredObject(uri=URI_PREFIX + key, sha256=hashed.digest.hexdigest(),
                            size_bytes=hashed.size)

    def copy_in(self, source: Path, key: str, *, cancelled: threading.Event | None = None
                ) -> str:
        why = f"the copy of {source.name} into {key!r} was cancelled"

        def on_progress(_: int) -> None:  # raised inside the transfer, which aborts its upload
            if cancelled is not None and cancelled.is_set():
                raise CopyCancelled(why)

        if cancelled is not None and cancelled.is_set():
            raise CopyCancelled(why)
        # upload_file reads each part from the file as it sends it: memory stays bounded.
        self._call("store", key, self._client.upload_file, str(source), self.bucket,
                   self._object_key(key), Config=_TRANSFER, Callback=on_progress)
        return URI_PREFIX + key

    def open_writer(self, key: str) -> S3ObjectWriter:
        return S3ObjectWriter(call=self._call, client=self._client, bucket=self.bucket,
                              object_key=self._object_key(key), key=key, describe=self.describe)

    def remove_abandoned_writes(self, folder: str, older_than: float) -> list[str]:
        """Abort the multipart uploads into `folder` whose latest part (or start, with none)
        came before `older_than`: an API that died mid-upload leaves its parts behind."""
        prefix = self._folder(folder)
        uploads = [upload for page in self._paged(folder, "list_multipart_uploads",
                                                  Bucket=self.bucket, Prefix=prefix)
                   for upload in page.get("Uploads", [])]
        removed = []
        for upload in uploads:
            if upload["Initiated"].timestamp() >= older_than:
                continue
            where = {"Bucket": self.bucket, "Key": upload["Key"], "UploadId": upload["UploadId"]}
            parts = [part for page in self._paged(folder, "list_parts", **where)
                     for part in page.get("Parts", [])]
            latest = max((part["LastModified"].timestamp() for part in parts),
                         default=upload["Initiated"].timestamp())
            if latest >= older_than:
                continue  # still being written
            key = upload["Key"].removeprefix(self.prefix)
            self._call("abort the upload of", key, self._client.abort_multipart_upload, **where)
            removed.append(key)
        return removed

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
        try:
            os.utime(path)  # used now: the last the cache lets go
            return path
        except FileNotFoundError:
            pass
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f".{path.name}.{uuid.uuid4().hex}.partial")
        try:
            self._call("read", key, self._client.download_file, self.bucket,
                       self._object_key(key), str(partial), Config=_TRANSFER)
            os.replace(partial, path)
        finally:
            partial.unlink(missing_ok=True)
        if self.cache_max_bytes is not None:
            trim_cache(self.cache_dir, self.cache_max_bytes)
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
        keys = [item["Key"] for page in self._pages(prefix, self._folder(prefix))
                for item in page.get("Contents", [])]
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

    def _folder(self, folder: str) -> str:
        return self._object_key(folder.rstrip("/")) + "/"

    def _pages(self, folder: str, prefix: str, delimiter: str = "") -> list[dict[str, Any]]:
        return self._paged(folder, "list_objects_v2", Bucket=self.bucket, Prefix=prefix,
                           Delimiter=delimiter)

    def _paged(self, folder: str, operation: str, **kwargs: Any) -> list[dict[str, Any]]:
        pages = self._client.get_paginator(operation).paginate(**kwargs)
        try:
            return list(pages)
        except (BotoCoreError, ClientError) as err:
            raise self._unavailable("list", folder, err) from err

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
            f"The artifact store ({self.describe}) could not {action}"
            f"{f' {key!r}' if key else ''}: {err}")


def trim_cache(folder: Path, max_bytes: int, *, in_use_s: float = _IN_USE_S) -> list[Path]:
    """Remove the least recently used files under `folder` until it holds at most `max_bytes`,
    sparing those used in the last `in_use_s` seconds (a job may be loading one); the removed."""
    files = []
    for path in folder.rglob("*"):
        try:
            if path.is_file():
                files.append((path.stat(), path))
        except FileNotFoundError:
            continue  # another process trimmed it
    total = sum(stat.st_size for stat, _ in files)
    recent = time.time() - in_use_s
    removed = []
    for stat, path in sorted(files, key=lambda item: item[0].st_mtime):
        if total <= max_bytes or stat.st_mtime >= recent:
            break
        path.unlink(missing_ok=True)
        total -= stat.st_size
        removed.append(path)
    return removed


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
