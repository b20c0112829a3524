"""Where a resumable upload's pieces are stored, and which uploads have expired
(the `resumable_uploads` table; the API's side is api/services/uploads/resumable.py)."""

import uuid
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from core.db.models import ResumableUpload
from core.db.types import utc_now

__all__ = ["expired_uploads", "live_uploads", "piece_folder", "piece_key"]


def piece_folder(upload_id: uuid.UUID) -> str:
    """The store folder of the upload's pieces, one object each."""
    return f"uploads/{upload_id}"


def piece_key(upload_id: uuid.UUID, offset: int) -> str:
    """The key of the piece that starts at `offset` (zero-padded: listed in order)."""
    return f"{piece_folder(upload_id)}/{offset:016d}"


def expired_uploads(session: Session, now: datetime | None = None) -> list[ResumableUpload]:
    return list(session.scalars(select(ResumableUpload).where(
        ResumableUpload.expires_at <= (now or utc_now()))))


def live_uploads(session: Session, now: datetime | None = None) -> list[uuid.UUID]:
    """The ids of the uploads that may still take pieces."""
    return list(session.scalars(select(ResumableUpload.id).where(
        ResumableUpload.expires_at > (now or utc_now()), ResumableUpload.model_sha256.is_(None))))
