"""A project's storage quota (FUSEFORGE_QUOTA__PROJECT_BYTES): what the project uses, and how
much room that leaves an upload.

Use is counted from the rows, so deletes and retention free it as they commit: the sizes of
the project's models and datasets plus its jobs' artifacts whose files are kept (not expired).
An upload is charged in full even when another project stored the same bytes (files are shared
by content, quotas are not). Uploads arriving at once each see the room left before them, so
together they may pass the limit by what they carry.
"""

import uuid
from dataclasses import dataclass

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from api.services.errors import QuotaExceeded
from core.db.models import Artifact, Dataset, Job, Model

__all__ = ["UploadRoom", "project_usage_bytes", "upload_room"]


@dataclass(frozen=True)
class UploadRoom:
    """What a project's quota leaves an upload."""

    used_bytes: int
    limit_bytes: int

    @property
    def bytes_left(self) -> int:
        return max(0, self.limit_bytes - self.used_bytes)

    def refusal(self) -> QuotaExceeded:
        return QuotaExceeded(
            f"the upload would take the project past its storage quota: it uses {self.used_bytes} "
            f"of its {self.limit_bytes} bytes (FUSEFORGE_QUOTA__PROJECT_BYTES), leaving "
            f"{self.bytes_left}; delete models, datasets or jobs it no longer needs (DELETE "
            "/v1/models/{id}, /v1/datasets/{id}, /v1/jobs/{id}) to make room")


def project_usage_bytes(session: Session, project_id: uuid.UUID) -> int:
    """Bytes the project's uploads and kept artifacts take."""
    parts = (
        select(func.coalesce(func.sum(Model.size_bytes), 0))
        .where(Model.project_id == project_id),
        select(func.coalesce(func.sum(Dataset.size_bytes), 0))
        .where(Dataset.project_id == project_id),
        select(func.coalesce(func.sum(Artifact.size_bytes), 0))
        .join(Job, Job.id == Artifact.job_id)
        .where(Job.project_id == project_id, Artifact.expired_at.is_(None)),
    )
    row = session.execute(select(*(part.scalar_subquery() for part in parts))).one()
    return sum(int(value) for value in row)


def upload_room(session: Session, project_id: uuid.UUID, limit_bytes: int) -> UploadRoom:
    return UploadRoom(used_bytes=project_usage_bytes(session, project_id), limit_bytes=limit_bytes)
