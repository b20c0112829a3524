"""Send jobs to the broker by task name, and check that it is reachable.

A producer only: the web process builds its own small Celery client from the broker URL and
never imports the worker's app, tasks or signals, so the API image carries no worker code.
Only the job id travels; the database holds the job (STYLE §5).
"""

import uuid
from functools import lru_cache

from celery import Celery

from core.job_config import JobConfig
from core.queues import CPU_QUEUE, RUN_JOB_TASK, job_queue

__all__ = ["JobDispatcher", "dispatcher_for"]

_SEND_RETRY = {"max_retries": 3, "interval_start": 0, "interval_step": 0.5}
_PING_TIMEOUT_S = 3


class JobDispatcher:
    """Sends `jobs.run` messages to the queue each job's config routes it to."""

    def __init__(self, broker_url: str) -> None:
        self._app = Celery("fuseforge-api", broker=broker_url, set_as_current=False)
        self._app.conf.update(task_default_queue=CPU_QUEUE, broker_connection_retry_on_startup=True)

    def send_job(self, job_id: uuid.UUID, config: JobConfig) -> None:
        """Send the job id (and nothing else) to its queue: the backend's, or a GPU's own queue
        when the job names a `target_gpu`. Raises the transport's error when the broker is down."""
        self._app.send_task(RUN_JOB_TASK, args=[str(job_id)], queue=job_queue(config),
                            retry=True, retry_policy=_SEND_RETRY)

    def broker_error(self) -> str | None:
        """None when the broker answers, else what went wrong (for /healthz)."""
        try:
            with self._app.connection_for_write() as connection:
                connection.ensure_connection(max_retries=1, timeout=_PING_TIMEOUT_S)
        except Exception as err:  # kombu raises transport-specific errors
            return f"{type(err).__name__}: {err}"
        return None


@lru_cache
def dispatcher_for(broker_url: str) -> JobDispatcher:
    """One dispatcher (and connection pool) per broker URL for the process."""
    return JobDispatcher(broker_url)
