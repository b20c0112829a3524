"""Send a finished job's webhook task, when the job has a callback URL.

Called where a job's end commits: the worker's supervisor (succeeded, failed), the janitor
(failed stale jobs) and the API (cancelled). Only the job id travels; the delivery task reads
the job (STYLE §5). A broker that cannot be reached is logged, not raised: the job's end is
already committed and must stand.
"""

import logging
import uuid
from typing import Protocol

from sqlalchemy.orm import Session

from core.db.models import Job
from core.webhooks.payload import event_of

__all__ = ["WebhookSender", "announce_end"]

logger = logging.getLogger(__name__)


class WebhookSender(Protocol):
    """What announcing needs of core.dispatch.JobDispatcher. A protocol, not the class: the
    dispatcher imports the job config, which imports the callback URL rules of this folder, so
    naming the class here would close an import circle (core.webhooks -> core.dispatch -> ...)."""

    def send_webhook(self, job_id: uuid.UUID) -> None: ...


def announce_end(session: Session, dispatcher: WebhookSender, job_id: uuid.UUID) -> bool:
    """Send `webhooks.deliver` for `job_id` if it ended and has a callback URL; whether sent."""
    job = session.get(Job, job_id, populate_existing=True)
    if job is None or event_of(job.status) is None or not job.config.get("callback_url"):
        return False
    try:
        dispatcher.send_webhook(job_id)
    except Exception:  # kombu raises transport-specific errors
        logger.exception("job %s ended but its webhook could not be sent to the broker", job_id)
        return False
    return True
