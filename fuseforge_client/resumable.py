"""Send a large upload in pieces over tus 1.0 (the server's /v1/uploads), resuming where the
server says it got after a lost connection, a 5xx, or the API restarting.

Each piece (`piece_bytes`, read from the file when it is sent, so memory holds one piece) goes
with its sha256 (Upload-Checksum); the server counts a piece only once it has stored all of
it, so after any failure the client asks (HEAD) how far it got and sends on from there. It
keeps trying for `resume_for_s` after the last piece that went through.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import time
from collections.abc import Callable
from typing import Protocol

from fuseforge_client.errors import ApiError, ConnectionFailedError
from fuseforge_client.session import ApiSession
from fuseforge_client.uploads import UploadProgress

__all__ = ["PIECE_BYTES", "RESUMABLE_FROM_BYTES", "send_resumable"]

logger = logging.getLogger("fuseforge_client")

PIECE_BYTES = 16 * 1024 * 1024
RESUMABLE_FROM_BYTES = 64 * 1024 * 1024  # smaller files go up in one request
_TUS = {"Tus-Resumable": "1.0.0"}
_PAUSE_S = (0.5, 1.0, 2.0, 5.0)


class Body(Protocol):
    total: int

    def read(self, size: int = -1) -> bytes: ...

    def seek(self, offset: int, whence: int = 0) -> int: ...


def send_resumable(session: ApiSession, body: Body, filename: str, *,
                   on_progress: UploadProgress | None = None, piece_bytes: int = PIECE_BYTES,
                   resume_for_s: float = 300.0,
                   sleep: Callable[[float], None] = time.sleep) -> str:
    """Upload `body` (`body.total` bytes) as a resumable upload named `filename`; its id, once
    the server holds every byte.

    Raises:
        ConnectionFailedError: the server stayed away (or kept failing) for `resume_for_s`.
        ApiError: the server refused the upload or a piece (413, 404 of an expired upload...).
    """
    created = session.request("POST", "/v1/uploads", headers={
        **_TUS, "Upload-Length": str(body.total),
        "Upload-Metadata": "filename " + base64.b64encode(filename.encode()).decode()})
    upload = created.headers["Location"].rstrip("/").rsplit("/", 1)[1]
    offset, failures, progressed_at = 0, 0, time.monotonic()
    body.seek(0)
    while offset < body.total:
        piece = body.read(min(piece_bytes, body.total - offset))
        try:
            answer = session.request("PATCH", f"/v1/uploads/{upload}", content=piece, headers={
                **_TUS, "Upload-Offset": str(offset),
                "Content-Type": "application/offset+octet-stream",
                "Upload-Checksum": "sha256 " + base64.b64encode(
                    hashlib.sha256(piece).digest()).decode()})
            offset = int(answer.headers["Upload-Offset"])
            failures, progressed_at = 0, time.monotonic()
            if on_progress is not None:
                on_progress(offset, body.total)
            continue
        except (ConnectionFailedError, ApiError) as err:
            if isinstance(err, ApiError) and not _worth_resuming(err):
                raise
            if time.monotonic() - progressed_at > resume_for_s:
                raise
            logger.info("upload %s: piece at %d failed (%s); resuming", upload, offset, err)
        failures += 1
        sleep(_PAUSE_S[min(failures, len(_PAUSE_S)) - 1])
        offset = _server_offset(session, upload, offset)
        body.seek(offset)
    return upload


def _worth_resuming(err: ApiError) -> bool:
    """A 409 (the offset moved: a piece we thought lost arrived), 460 (damaged on the way) or
    a server error: ask where the upload is and go on. Anything else is the server's no."""
    return err.status_code in (409, 460) or (err.status_code or 0) >= 500


def _server_offset(session: ApiSession, upload: str, fallback: int) -> int:
    try:
        answer = session.request("HEAD", f"/v1/uploads/{upload}", headers=_TUS)
    except ConnectionFailedError:
        return fallback  # still away: the next PATCH tries again, and asks again after it
    except ApiError as err:
        if (err.status_code or 0) >= 500:
            return fallback
        raise
    return int(answer.headers["Upload-Offset"])
