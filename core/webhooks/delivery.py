"""Deliver a job's webhook: one attempt at a time, each recorded, saying whether to try again.

The worker's `webhooks.deliver` task calls `deliver_attempt` and, when it answers a pause,
sends itself again after it (worker/tasks/deliver_webhook.py). Attempts are numbered from the
rows already recorded, so a redelivered task message continues the count instead of starting
over, and a job whose webhook was delivered is never sent again.

Retried: no answer (connection refused, timeout), 429 and 5xx. Final: 2xx (delivered), a
redirect (never followed), any other 4xx, a host the address guard refuses, the last attempt.
"""

import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

from sqlalchemy import case, func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from core.callbacks.signing import SIGNATURE_HEADER, signature_header
from core.db.models import Job, WebhookDelivery
from core.settings import Settings
from core.webhooks.payload import event_of, job_payload
from core.webhooks.transport import Answer, post

__all__ = ["EVENT_HEADER", "ID_HEADER", "Attempt", "deliver_attempt", "delivery_id"]

logger = logging.getLogger(__name__)

EVENT_HEADER = "FuseForge-Event"
ID_HEADER = "FuseForge-Delivery"
_USER_AGENT = "FuseForge-Webhooks/1"


@dataclass(frozen=True)
class Attempt:
    """The attempt just recorded; `retry_after_s` is the pause before the next (None: done)."""

    number: int
    status_code: int | None
    error: str | None
    retry_after_s: float | None


def delivery_id(job_id: uuid.UUID, event: str) -> uuid.UUID:
    """One id per job and event, the same on every attempt: receivers deduplicate with it."""
    return uuid.uuid5(job_id, event)


def deliver_attempt(sessions: sessionmaker[Session], job_id: uuid.UUID, settings: Settings,
                    clock: Callable[[], float] = time.time) -> Attempt | None:
    """Make the next attempt to deliver `job_id`'s webhook and record it; None when there is
    nothing to do (no callback URL, the job has not ended, delivery already settled, the job
    was deleted)."""
    webhooks = settings.webhooks
    with sessions() as session:
        job = session.get(Job, job_id)
        url = job.config.get("callback_url") if job is not None else None
        event = event_of(job.status) if job is not None else None
        if job is None or not url or event is None:
            logger.info("job %s: no webhook to deliver", job_id)
            return None
        made, settled = session.execute(
            select(func.count(), func.coalesce(func.sum(case((WebhookDelivery.final, 1), else_=0)), 0))
            .where(WebhookDelivery.job_id == job_id)).one()
        if settled:
            logger.info("job %s: its webhook delivery is already settled", job_id)
            return None
        body = job_payload(session, job)
    number = made + 1
    identity = delivery_id(job_id, event)
    headers = {
        SIGNATURE_HEADER: signature_header(settings.resolved_webhook_secret, body, int(clock())),
        EVENT_HEADER: event,
        ID_HEADER: str(identity),
        "User-Agent": _USER_AGENT,
    }
    started = time.monotonic()
    answer = post(url, body, headers, webhooks)
    duration_ms = (time.monotonic() - started) * 1000
    error, retry = _judge(answer)
    last = number >= webhooks.max_attempts
    final = not retry or last
    if retry and last:
        error = f"{error}; gave up after {number} attempts"
    try:
        with sessions() as session, session.begin():
            session.add(WebhookDelivery(
                job_id=job_id, delivery_id=identity, event=event, attempt=number,
                url=url, status_code=answer.status_code, error=error,
                duration_ms=duration_ms, final=final))
    except IntegrityError:
        if _job_exists(sessions, job_id):
            raise  # a duplicate attempt row: a fault of ours
        logger.info("job %s was deleted during its webhook attempt; no more are made", job_id)
        return None
    logger.info("job %s: webhook %s attempt %d to %s: %s", job_id, event, number,
                urlsplit(url).netloc, error or f"delivered ({answer.status_code})")
    return Attempt(number=number, status_code=answer.status_code, error=error,
                   retry_after_s=None if final else webhooks.retry_after_s(number))


def _job_exists(sessions: sessionmaker[Session], job_id: uuid.UUID) -> bool:
    with sessions() as session:
        return session.get(Job, job_id) is not None


def _judge(answer: Answer) -> tuple[str | None, bool]:
    """(the error to record, None when delivered; whether another attempt may succeed)."""
    code = answer.status_code
    if code is None:
        return answer.error, not answer.refused
    if 200 <= code < 300:
        return None, False
    if 300 <= code < 400:
        where = f" to {answer.location}" if answer.location else ""
        return (f"the receiver answered {code} (a redirect{where}); redirects are not followed: "
                "set callback_url to the final URL"), False
    if code == 429 or code >= 500:
        return f"the receiver answered {code}", True
    return f"the receiver answered {code}; a 4xx other than 429 is not retried", False
