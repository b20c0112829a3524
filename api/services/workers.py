"""The workers table read for the API: which workers are online and what they can build on."""

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session
from sqlalchemy.sql.elements import ColumnElement

from api.db.models import Worker
from api.db.types import utc_now

__all__ = ["is_online", "list_workers", "online_workers"]


def _online_clause(now: datetime) -> ColumnElement[bool]:
    # worker/capabilities.py: a heartbeat moves expires_at ahead; a clean shutdown sets stopped_at.
    return (Worker.expires_at > now) & Worker.stopped_at.is_(None)


def is_online(worker: Worker, now: datetime | None = None) -> bool:
    return worker.stopped_at is None and worker.expires_at > (now or utc_now())


def online_workers(session: Session) -> Sequence[Worker]:
    """Workers with a recent heartbeat and no clean shutdown, by name."""
    return session.scalars(
        select(Worker).where(_online_clause(utc_now())).order_by(Worker.name)).all()


def list_workers(*, session: Session, online_only: bool) -> Sequence[Worker]:
    """Every worker ever recorded (or only the online ones), latest heartbeat first."""
    query = select(Worker).order_by(Worker.heartbeat_at.desc(), Worker.name)
    if online_only:
        query = query.where(_online_clause(utc_now()))
    return session.scalars(query).all()
