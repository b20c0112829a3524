"""This worker's row in the `workers` table: what it consumes and builds on, kept fresh by a
heartbeat thread in the worker's main process (the table's rules: core/db/worker_registry.py).

worker/celery_app.py starts the heartbeat once the worker is ready and stops it on shutdown;
a clean shutdown marks the worker stopped at once, a silent death lets the row expire.
"""

import logging
import os
import threading
from collections.abc import Sequence

from sqlalchemy import Engine
from sqlalchemy.orm import Session

from core.db.session import make_engine
from core.db.types import utc_now
from core.db.worker_registry import record_heartbeat, record_stopped
from optimizer.capabilities import HostCapabilities

__all__ = ["WorkerHeartbeat"]

logger = logging.getLogger(__name__)


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
