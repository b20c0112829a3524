"""Send jobs (and their webhooks) to the broker by task name, and look into it: is it
reachable, which job messages does it hold.

A producer only: a small Celery client built from the broker URL, used by the API (to dispatch
a job after its row commits) and by the janitor (to re-send a queued job whose message the broker
lost). It never loads the worker's app, tasks or signals. Only the job id travels; the database
holds the job (STYLE §5).
"""

import base64
import json
import logging
import uuid
from collections.abc import Iterable
from functools import lru_cache
from typing import Any

import redis
from celery import Celery
from kombu.connection import Connection
from kombu.entity import Exchange, Queue
from sqlalchemy import bindparam, create_engine, text
from sqlalchemy.engine import make_url

from core.job_config import JobConfig
from core.queues import (
    CPU_QUEUE,
    DELIVER_WEBHOOK_TASK,
    GPU_QUEUE,
    RUN_JOB_TASK,
    WEBHOOK_QUEUE,
    job_queue,
)

__all__ = ["JobDispatcher", "dispatcher_for"]

logger = logging.getLogger(__name__)

_SEND_RETRY = {"max_retries": 3, "interval_start": 0, "interval_step": 0.5}
_PING_TIMEOUT_S = 3
_REDIS_UNACKED = "unacked"  # kombu's Redis transport: delivered, not yet acknowledged


class JobDispatcher:
    """Sends `jobs.run` messages to the queue each job's config routes it to."""

    def __init__(self, broker_url: str) -> None:
        self.broker_url = broker_url
        self._app = Celery("fuseforge-producer", broker=broker_url, set_as_current=False)
        self._app.conf.update(task_default_queue=CPU_QUEUE, broker_connection_retry_on_startup=True)

    def send_job(self, job_id: uuid.UUID, config: JobConfig) -> None:
        """Send the job id (and nothing else) to its queue: the backend's, or a GPU's own queue
        when the job names a `target_gpu`. Raises the transport's error when the broker is down."""
        self._app.send_task(RUN_JOB_TASK, args=[str(job_id)], queue=job_queue(config),
                            retry=True, retry_policy=_SEND_RETRY)

    def send_webhook(self, job_id: uuid.UUID) -> None:
        """Send `webhooks.deliver` for a job that ended (core/webhooks/announce.py)."""
        self._app.send_task(DELIVER_WEBHOOK_TASK, args=[str(job_id)], queue=WEBHOOK_QUEUE,
                            retry=True, retry_policy=_SEND_RETRY)

    def broker_error(self) -> str | None:
        """None when the broker answers, else what went wrong (for /healthz)."""
        try:
            with self._app.connection_for_write() as connection:
                connection.ensure_connection(max_retries=1, timeout=_PING_TIMEOUT_S)
        except Exception as err:  # kombu raises transport-specific errors
            return f"{type(err).__name__}: {err}"
        return None

    def declare_queues(self, names: Iterable[str] = (CPU_QUEUE, GPU_QUEUE, WEBHOOK_QUEUE)
                       ) -> None:
        """Create the queues before the API and the workers start, so they never race to create
        the same one (kombu's SQL transport fails one of two simultaneous creations)."""
        # kombu's Connection and Queue are unannotated.
        with Connection(self.broker_url) as connection:  # type: ignore[no-untyped-call]
            channel = connection.default_channel
            for name in names:
                queue = Queue(name, Exchange(name), routing_key=name)  # type: ignore[no-untyped-call]
                queue(channel).declare()  # type: ignore[no-untyped-call]

    def held_job_ids(self, queues: Iterable[str]) -> set[uuid.UUID] | None:
        """The ids of the jobs whose `jobs.run` message the broker holds in `queues`: waiting,
        or (Redis) delivered and not yet acknowledged; None where this broker cannot be looked
        into. kombu's SQL transport keeps no trace that tells a message in flight from one
        acknowledged, so there only waiting messages count (a job claimed meanwhile is not
        queued, and a duplicate finds it claimed)."""
        url = make_url(self.broker_url) if "://" in self.broker_url else None
        if url is None:
            return None
        scheme = url.drivername
        if scheme in ("redis", "rediss"):
            return _ids(_redis_messages(self.broker_url, queues))
        if scheme.startswith("sqla+"):
            return _ids(_sql_messages(self.broker_url.removeprefix("sqla+"), queues))
        return None


@lru_cache
def dispatcher_for(broker_url: str) -> JobDispatcher:
    """One dispatcher (and connection pool) per broker URL for the process."""
    return JobDispatcher(broker_url)


def _redis_messages(url: str, queues: Iterable[str]) -> list[dict[str, Any]]:
    client = redis.Redis.from_url(url)
    try:
        raw = [item for queue in queues for item in client.lrange(queue, 0, -1)]
        # An unacked entry is [message, exchange, routing key].
        unacked = [json.loads(entry)[0] for entry in client.hvals(_REDIS_UNACKED)]
    finally:
        client.close()
    return [json.loads(item) for item in raw] + unacked


def _sql_messages(url: str, queues: Iterable[str]) -> list[dict[str, Any]]:
    names = list(queues)
    if not names:
        return []
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            rows = connection.execute(text(
                # kombu's SQL transport never deletes a delivered message: it only hides it
                # (visible false), acked or not. Only the waiting ones are still held.
                "SELECT m.payload FROM kombu_message m JOIN kombu_queue q ON m.queue_id = q.id "
                "WHERE q.name IN :names AND m.visible").bindparams(
                    bindparam("names", expanding=True)),
                {"names": names}).all()
    except Exception as err:  # no kombu tables yet: nothing was ever sent
        logger.debug("broker tables not readable: %s", err)
        return []
    finally:
        engine.dispose()
    return [json.loads(payload) for (payload,) in rows]


def _ids(messages: list[dict[str, Any]]) -> set[uuid.UUID]:
    """Job ids of the `jobs.run` messages (Celery's message protocol 2)."""
    ids = set()
    for message in messages:
        headers = message.get("headers", {})
        if headers.get("task") != RUN_JOB_TASK:
            continue
        try:
            args, _kwargs, _embed = json.loads(base64.b64decode(message["body"]))
            ids.add(uuid.UUID(str(args[0])))
        except (KeyError, ValueError, IndexError, TypeError):
            logger.warning("unreadable jobs.run message %s", headers.get("id"))
    return ids
