"""The `search_candidates` table's rules: a search job's candidates as they were judged, and
one row per (job, candidate) however often a resumed search records it. The caller commits."""

import uuid
from collections.abc import Sequence
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from core.db.models import SearchCandidate

__all__ = ["candidates_of", "record_candidate"]


def candidates_of(session: Session, job_id: uuid.UUID) -> Sequence[SearchCandidate]:
    """Job `job_id`'s candidates in the order they were first recorded."""
    return session.scalars(select(SearchCandidate).where(SearchCandidate.job_id == job_id)
                           .order_by(SearchCandidate.id)).all()


def record_candidate(session: Session, job_id: uuid.UUID, name: str, **values: Any) -> None:
    """Insert candidate `name` of job `job_id`, or update its row (a "building" row becomes the
    outcome). `values`: the other columns (outcome, reason, recipe, accuracy, engine_bytes,
    build_s)."""
    row = session.scalars(select(SearchCandidate).where(
        SearchCandidate.job_id == job_id, SearchCandidate.name == name)).one_or_none()
    if row is None:
        session.add(SearchCandidate(job_id=job_id, name=name, **values))
        return
    for column, value in values.items():
        setattr(row, column, value)
