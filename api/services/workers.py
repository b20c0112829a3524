"""The workers table read for the API: every worker recorded, or only the online ones."""

from collections.abc import Sequence

from sqlalchemy import select
from sqlalchemy.orm import Session

from core.db.models import Worker
from core.db.types import utc_now
from core.db.worker_registry import online_clause

__all__ = ["list_workers"]


def list_workers(*, session: Session, online_only: bool) -> Sequence[Worker]:
    """Every worker ever recorded (or only the online ones), latest heartbeat first."""
    query = select(Worker).order_by(Worker.heartbeat_at.desc(), Worker.name)
    if online_only:
        query = query.where(online_clause(utc_now()))
    return session.scalars(query).all()
