"""The `workers` table's rules: a worker's heartbeat writes, and who counts as online.

A worker upserts its row at start and on every heartbeat; each beat moves `expires_at`
`EXPIRY_INTERVALS` intervals ahead, so a worker that dies silently drops offline by itself, and
a clean shutdown marks it stopped at once. The API reads the same rule to tell a user that no
online worker can take their job.
"""

import os
import socket
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session
from sqlalchemy.sql.elements import ColumnElement

from core.db.models import Worker
from core.db.types import utc_now
from optimizer.capabilities import HostCapabilities

__all__ = [
    "EXPIRY_INTERVALS",
    "is_online",
    "online_clause",
    "online_workers",
    "record_heartbeat",
    "record_stopped",
]

EXPIRY_INTERVALS = 3  # a worker is offline after missing this many heartbeats


def record_heartbeat(
    session: Session,
    *,
    name: str,
    queues: Sequence[str],
    capabilities: HostCapabilities,
    started_at: datetime,
    interval_s: float,
    now: datetime | None = None,
    hostname: str | None = None,
    pid: int | None = None,
) -> None:
    """Insert or refresh the row of worker `name`: queues, capabilities, and a new expiry."""
    now = now or utc_now()
    gpu = capabilities.gpu
    values: dict[str, Any] = {
        "hostname": hostname or socket.gethostname(),
        "pid": pid if pid is not None else os.getpid(),
        "queues": list(queues),
        "gpu_name": gpu.name if gpu else None,
        "compute_capability": gpu.compute_capability if gpu else None,
        "gpu_memory_mib": gpu.memory_total_mib if gpu else None,
        "tensorrt_version": capabilities.tensorrt_version,
        "capabilities": capabilities.to_dict(),
        "started_at": started_at,
        "heartbeat_at": now,
        "expires_at": now + timedelta(seconds=interval_s * EXPIRY_INTERVALS),
        "stopped_at": None,
    }
    session.execute(_upsert(session, {"name": name, **values}, values))


def _upsert(session: Session, row: Mapping[str, Any], changes: Mapping[str, Any]) -> Any:
    dialect = session.get_bind().dialect.name
    if dialect == "postgresql":
        pg = postgresql.insert(Worker).values(**row)
        return pg.on_conflict_do_update(index_elements=[Worker.name], set_=dict(changes))
    if dialect == "sqlite":
        lite = sqlite.insert(Worker).values(**row)
        return lite.on_conflict_do_update(index_elements=[Worker.name], set_=dict(changes))
    raise NotImplementedError(f"no worker upsert for database dialect {dialect!r}")


def record_stopped(session: Session, name: str, now: datetime | None = None) -> None:
    """Mark worker `name` offline now (a clean shutdown), so no job waits on it."""
    now = now or utc_now()
    session.execute(update(Worker).where(Worker.name == name).values(stopped_at=now, expires_at=now))


def online_clause(now: datetime) -> ColumnElement[bool]:
    """Workers whose heartbeat has not expired and that did not shut down."""
    return (Worker.expires_at > now) & Worker.stopped_at.is_(None)


def is_online(worker: Worker, now: datetime | None = None) -> bool:
    return worker.stopped_at is None and worker.expires_at > (now or utc_now())


def online_workers(session: Session) -> Sequence[Worker]:
    """Workers with a recent heartbeat and no clean shutdown, by name."""
    return session.scalars(
        select(Worker).where(online_clause(utc_now())).order_by(Worker.name)).all()
