"""Record what this worker can build on (GPU, TensorRT) in the `workers` table, with a heartbeat.

The worker's main process detects its capabilities once at start (worker/celery_app.py calls
`detect_worker_capabilities` from `celeryd_after_setup`), then `start_worker_heartbeat` upserts
its row now and every `jobs.heartbeat_interval_s`; each beat moves `expires_at` three intervals
ahead, so a worker that dies silently drops offline by itself, and a clean shutdown marks it
stopped at once. The API reads the table to tell a user that no worker can take their job.
"""

import logging
import os
import socket
import threading
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Engine, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from api.db.models import Worker
from api.db.session import make_engine
from api.db.types import utc_now
from api.settings import get_settings
from optimizer.capabilities import HostCapabilities
from worker.tensorrt_toolkit import load_toolkit

__all__ = [
    "EXPIRY_INTERVALS",
    "WorkerHeartbeat",
    "detect_worker_capabilities",
    "record_heartbeat",
    "record_stopped",
    "refusal_for",
    "start_worker_heartbeat",
    "stop_worker_heartbeat",
]

logger = logging.getLogger(__name__)

EXPIRY_INTERVALS = 3  # a worker is offline after missing this many heartbeats

_detected: HostCapabilities | None = None
_heartbeat: "WorkerHeartbeat | None" = None


def detect_worker_capabilities() -> HostCapabilities:
    """This host's capabilities, detected on the first call and remembered for the process
    (by the configured TensorRT toolkit: TensorRT itself unless FUSEFORGE_TENSORRT_TOOLKIT says)."""
    global _detected
    if _detected is None:
        _detected = load_toolkit(get_settings().tensorrt_toolkit).detect_capabilities()
    return _detected


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


def refusal_for(config: Mapping[str, Any], capabilities: HostCapabilities) -> str | None:
    """Why this host cannot run a job with `config`, or None if it can.

    For the pipeline to raise as EngineBuildError when a job reaches a worker that cannot build
    it (e.g. one started with a hand-written queue list).
    """
    if config.get("backend") != "tensorrt":
        return None
    if not capabilities.can_build_tensorrt:
        return (
            f"backend 'tensorrt' needs a worker with an NVIDIA GPU and TensorRT; this worker has "
            f"{capabilities.describe()}. Start one with `fuseforge worker --queues gpu` on a GPU "
            f"machine, or use backend 'onnxruntime'."
        )
    return None


class WorkerHeartbeat:
    """A daemon thread that upserts this worker's row every `interval_s` until `stop()`.

    It uses an engine of its own (no pooled connection kept between beats), so a pool process
    forked from the worker later never shares a database connection with this thread.
    """

    def __init__(
        self,
        name: str,
        queues: Sequence[str],
        capabilities: HostCapabilities,
        *,
        database_url: str,
        interval_s: float,
    ) -> None:
        self.name = name
        self._queues = list(queues)
        self._capabilities = capabilities
        self._interval_s = interval_s
        self._started_at = utc_now()
        self._engine: Engine = make_engine(database_url)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"worker-heartbeat-{name}", daemon=True)
        os.register_at_fork(after_in_child=self._forget_connections)

    def _forget_connections(self) -> None:
        # The SQLAlchemy docs' advice for os.fork(): the child must not reuse the parent's sockets.
        self._engine.dispose(close=False)

    def beat(self) -> None:
        with Session(self._engine) as session, session.begin():
            record_heartbeat(
                session,
                name=self.name,
                queues=self._queues,
                capabilities=self._capabilities,
                started_at=self._started_at,
                interval_s=self._interval_s,
            )

    def _run(self) -> None:
        while True:
            try:
                self.beat()
            except Exception:  # the database may be briefly away; the next beat retries
                logger.exception("worker heartbeat for %s failed", self.name)
            if self._stop.wait(self._interval_s):
                return

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop beating and mark the worker stopped."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)
        try:
            with Session(self._engine) as session, session.begin():
                record_stopped(session, self.name)
        except Exception:
            logger.exception("could not mark worker %s stopped; it expires on its own", self.name)
        finally:
            self._engine.dispose()


def start_worker_heartbeat(name: str, queues: Sequence[str]) -> WorkerHeartbeat:
    """Start (once per process) the heartbeat of worker `name` consuming `queues`."""
    global _heartbeat
    if _heartbeat is None:
        settings = get_settings()
        _heartbeat = WorkerHeartbeat(
            name,
            queues,
            detect_worker_capabilities(),
            database_url=settings.resolved_database_url,
            interval_s=settings.jobs.heartbeat_interval_s,
        )
        _heartbeat.start()
    return _heartbeat


def stop_worker_heartbeat() -> None:
    global _heartbeat
    if _heartbeat is not None:
        _heartbeat.stop()
        _heartbeat = None
