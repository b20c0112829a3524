"""The answer to an artifact download, by store: a 307 to a presigned URL of an object store (the
bytes go from the store to the client), the file itself from a local folder, or the object
streamed through the API where presigned downloads are off."""

import tarfile
from collections.abc import Iterator, Sequence
from pathlib import PurePath

from fastapi import Response
from fastapi.responses import FileResponse, RedirectResponse, StreamingResponse

from core.artifact_refs import attachment_disposition
from core.db.models import Artifact
from core.storage import ArtifactStore, LocalArtifactStore

__all__ = ["artifact_download", "artifacts_archive"]

_CHUNK = 1024 * 1024
# What a download says it is, by the artifact's extension; anything else is bytes.
_MEDIA_TYPES = {".svg": "image/svg+xml"}
# A plot is SVG, which can carry script: ours escape every label, and this keeps any that
# slipped through from running (or loading anything) if a browser shows it.
_CONTENT_HEADERS = {"Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'",
                    "X-Content-Type-Options": "nosniff"}


def artifact_download(store: ArtifactStore, artifact: Artifact) -> Response:
    media_type = _MEDIA_TYPES.get(PurePath(artifact.name).suffix.lower(),
                                  "application/octet-stream")
    checksum = {"X-Content-SHA256": artifact.sha256}
    url = store.download_url(artifact.uri, filename=artifact.name, media_type=media_type)
    if url is not None:
        # The URL carries a signature that expires: no cache may keep this answer.
        return RedirectResponse(url, status_code=307,
                                headers={**checksum, "Cache-Control": "no-store"})
    if isinstance(store, LocalArtifactStore):  # a file: FileResponse answers Range requests
        return FileResponse(store.local_path(artifact.uri), filename=artifact.name,
                            media_type=media_type, headers={**checksum, **_CONTENT_HEADERS})
    return StreamingResponse(
        _chunks(store, artifact.uri), media_type=media_type,
        headers={**checksum, **_CONTENT_HEADERS, "Content-Length": str(artifact.size_bytes),
                 "Content-Disposition": attachment_disposition(artifact.name)})


def _chunks(store: ArtifactStore, uri: str) -> Iterator[bytes]:
    with store.open(uri) as stored:  # opened on the first chunk, in Starlette's thread pool
        while chunk := stored.read(_CHUNK):
            yield chunk


def artifacts_archive(store: ArtifactStore, archive_name: str,
                      artifacts: Sequence[Artifact]) -> Response:
    """`artifacts` as one uncompressed tar, streamed out of the store a file at a time (an
    engine with its data file is one download); its length is known before the first byte."""
    headers = [_tar_header(artifact) for artifact in artifacts]
    length = 2 * tarfile.BLOCKSIZE + sum(
        len(header) + artifact.size_bytes + _padding(artifact.size_bytes)
        for header, artifact in zip(headers, artifacts, strict=True))
    return StreamingResponse(
        _archive_chunks(store, headers, artifacts), media_type="application/x-tar",
        headers={"Content-Length": str(length),
                 "Content-Disposition": attachment_disposition(archive_name)})


def _tar_header(artifact: Artifact) -> bytes:
    member = tarfile.TarInfo(artifact.name)
    member.size, member.mode = artifact.size_bytes, 0o644
    return member.tobuf(format=tarfile.PAX_FORMAT)


def _padding(size: int) -> int:
    return -size % tarfile.BLOCKSIZE


def _archive_chunks(store: ArtifactStore, headers: Sequence[bytes],
                    artifacts: Sequence[Artifact]) -> Iterator[bytes]:
    for header, artifact in zip(headers, artifacts, strict=True):
        yield header
        sent = 0
        for chunk in _chunks(store, artifact.uri):
            sent += len(chunk)
            yield chunk
        if sent != artifact.size_bytes:  # the answer's length is promised: break it loudly
            raise OSError(f"artifact {artifact.name} has {sent} bytes in the store, not the "
                          f"{artifact.size_bytes} recorded")
        yield bytes(_padding(artifact.size_bytes))
    yield bytes(2 * tarfile.BLOCKSIZE)
