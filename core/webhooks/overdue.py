"""Finished jobs whose webhook delivery is overdue: the broker message that would make the next
attempt was lost (never sent, or acked by a worker that died before recording its attempt).

A job is overdue when it has a callback URL, no final attempt (delivered, refused or given up),
and either no attempt at all `after` past its end, or its last attempt asked for a retry that
was due more than `after` ago. The janitor (worker/janitor.py) re-sends these unless the broker
still holds their message. A webhook with a final attempt is never overdue, and
core/webhooks/delivery.py makes no attempt once one is final, so a re-sent message that turns out
to be a duplicate does nothing after a delivery that succeeded.
"""

import uuid
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

from core.db.models import Job, WebhookDelivery
from core.settings import WebhookSettings
from core.webhooks.payload import EVENTS

__all__ = ["OverdueDelivery", "overdue_deliveries"]


@dataclass(frozen=True)
class OverdueDelivery:
    job_id: uuid.UUID
    reason: str  # why it is overdue, for the job's events and the log


def overdue_deliveries(session: Session, *, now: datetime, after: timedelta, within: timedelta,
                       webhooks: WebhookSettings) -> list[OverdueDelivery]:
    """The overdue webhooks of jobs that ended between `within` and `after` before `now`."""
    settled = (select(WebhookDelivery.id)
               .where(WebhookDelivery.job_id == Job.id, WebhookDelivery.final).exists())
    ended = session.execute(select(Job.id, Job.finished_at).where(
        Job.status.in_([status.value for status in EVENTS]),
        Job.finished_at >= now - within, Job.finished_at <= now - after,
        Job.config["callback_url"].as_string().is_not(None), ~settled)).all()
    if not ended:
        return []
    attempts: dict[uuid.UUID, list[tuple[int, datetime]]] = defaultdict(list)
    for job_id, attempt, at in session.execute(
            select(WebhookDelivery.job_id, WebhookDelivery.attempt, WebhookDelivery.created_at)
            .where(WebhookDelivery.job_id.in_([job_id for job_id, _ in ended]))):
        attempts[job_id].append((attempt, at))
    overdue = []
    for job_id, finished_at in ended:
        if finished_at is None:  # the query's bounds exclude it; this tells the type checker
            continue
        if not attempts[job_id]:
            overdue.append(OverdueDelivery(job_id, (
                f"no delivery attempt was made in the {_seconds(now - finished_at)} since the "
                "job ended")))
            continue
        number, at = max(attempts[job_id])
        due = at + timedelta(seconds=webhooks.retry_after_s(number))
        if now - due >= after:
            overdue.append(OverdueDelivery(job_id, (
                f"attempt {number + 1} was due {_seconds(now - due)} ago and was not made")))
    return overdue


def _seconds(span: timedelta) -> str:
    return f"{span.total_seconds():.0f} s"
