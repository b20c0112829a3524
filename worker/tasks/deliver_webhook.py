"""Task `webhooks.deliver`: POST a finished job's webhook, again after a pause while it fails.

Each run makes one attempt (core/webhooks/delivery.py records it); a retry is a new message
with a countdown, so a worker is not held while the pause runs.
"""

import uuid

from celery import Task

from core.queues import DELIVER_WEBHOOK_TASK
from core.webhooks.delivery import deliver_attempt
from worker.celery_app import celery_app
from worker.runtime import current_runtime


@celery_app.task(name=DELIVER_WEBHOOK_TASK, bind=True, acks_late=True, ignore_result=True,  # type: ignore[untyped-decorator]
                 max_retries=None)
def deliver_webhook_task(self: Task, job_id: str) -> None:
    runtime = current_runtime()
    attempt = deliver_attempt(runtime.sessions, uuid.UUID(job_id), runtime.settings)
    if attempt is not None and attempt.retry_after_s is not None:
        # The attempt count lives in the database; Celery's own limit is off (max_retries).
        raise self.retry(countdown=attempt.retry_after_s)
