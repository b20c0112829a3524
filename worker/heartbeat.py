"""A background thread that touches the job's heartbeat while a long stage runs."""

import logging
import threading
import uuid
from types import TracebackType

from api.db import job_state
from api.db.session import session_scope

__all__ = ["Heartbeat"]

logger = logging.getLogger(__name__)


class Heartbeat:
    """Context manager; `still_running` turns False once the job is cancelled or swept."""

    def __init__(self, job_id: uuid.UUID, interval_s: float) -> None:
        self._job_id = job_id
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name=f"heartbeat-{job_id}", daemon=True)
        self.still_running = True

    def _beat(self) -> None:
        while not self._stop.wait(self._interval_s):
            try:
                with session_scope() as session:
                    self.still_running = job_state.heartbeat(session, self._job_id)
            except Exception:  # a database blip must not kill the job; the next beat retries
                logger.exception("heartbeat for job %s failed", self._job_id)
            if not self.still_running:
                return

    def __enter__(self) -> "Heartbeat":
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._thread.join()
