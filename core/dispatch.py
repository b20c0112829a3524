"""Send jobs (and their webhooks) to the broker by task name, and look into it: is it
reachable, which job and webhook messages does it hold, how many wait in each queue.

A producer only: a small Celery client built from the broker URL, used by the API (to dispatch
a job after its row commits) and by the janitor (to re-send a queued job, or a finished job's
webhook, whose message the broker lost). It never loads the worker's app, tasks or signals. Only
the job id travels; the database holds the job (STYLE §5).
"""

import base64
import json
import logging
import uuid
from collections.abc import Iterable
from functools import lru_cache
from typing import Any

import redis
import sqlalchemy.exc
from celery import Celery
from kombu.connection import Connection
from kombu.entity import Exchange, Queue
from sqlalchemy import bindparam, create_engine, text
from sqlalchemy.engine import make_url

from core.job_config import JobConfig
from core.queues import (
    CPU_QUEUE,
    DELIVER_WEBHOOK_TASK,
    RUN_JOB_TASK,
    WEBHOOK_QUEUE,
    backend_queues,
    job_queue,
)

__all__ = ["JobDispatcher", "dispatcher_for"]

logger = logging.getLogger(__name__)

_SEND_RETRY = {"max_retries": 3, "interval_start": 0, "interval_step": 0.5}
_PING_TIMEOUT_S = 3
_REDIS_UNACKED = "unacked"  # kombu's Redis transport: delivered, not yet acknowledged
# kombu's Redis transport keeps a queue's messages of priority p > 0 in the list "<queue>\x06\x16<p>"
# (its default priority steps); priority 0, what FuseForge sends, in the list named as the queue.
_REDIS_PRIORITY_SUFFIXES = ("", "\x06\x163", "\x06\x166", "\x06\x169")


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

    def declare_queues(self, names: Iterable[str] | None = None) -> None:
        """Create the queues (by default every backend's and the webhooks') before the API and
        the workers start, so they never race to create the same one (kombu's SQL transport
        fails one of two simultaneous creations)."""
        if names is None:
            names = [*backend_queues(), WEBHOOK_QUEUE]
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
        return self._held_ids(queues, RUN_JOB_TASK)

    def delivered_job_ids(self) -> set[uuid.UUID] | None:
        """The ids of the jobs whose `jobs.run` message a worker took and has not acknowledged
        (Redis' unacked messages); None where this broker cannot tell (kombu's SQL transport).
        A queued job among them was taken by a worker that never claimed it: one that died
        first, whose message the broker gives back only after its visibility timeout."""
        url = make_url(self.broker_url) if "://" in self.broker_url else None
        if url is None or url.drivername not in ("redis", "rediss"):
            return None
        client = redis.Redis.from_url(self.broker_url)
        try:
            return _ids(_redis_unacked(client), RUN_JOB_TASK)
        finally:
            client.close()

    def held_webhook_job_ids(self) -> set[uuid.UUID] | None:
        """The ids of the jobs whose `webhooks.deliver` message the broker holds, as
        held_job_ids counts them (with Redis, a retry waiting out its countdown in a worker is
        delivered and not yet acknowledged, so it counts); None where it cannot be looked into."""
        return self._held_ids([WEBHOOK_QUEUE], DELIVER_WEBHOOK_TASK)

    def _held_ids(self, queues: Iterable[str], task: str) -> set[uuid.UUID] | None:
        url = make_url(self.broker_url) if "://" in self.broker_url else None
        if url is None:
            return None
        scheme = url.drivername
        if scheme in ("redis", "rediss"):
            return _ids(_redis_messages(self.broker_url, queues), task)
        if scheme.startswith("sqla+"):
            return _ids(_sql_messages(self.broker_url.removeprefix("sqla+"), queues), task)
        return None

    def queue_depths(self, queues: Iterable[str]) -> dict[str, int] | None:
        """How many messages wait (delivered ones not counted) in each of `queues`; None where
        this broker cannot be looked into. Raises the transport's error when it is down."""
        url = make_url(self.broker_url) if "://" in self.broker_url else None
        if url is None:
            return None
        names = sorted(set(queues))
        if url.drivername in ("redis", "rediss"):
            return _redis_depths(self.broker_url, names)
        if url.drivername.startswith("sqla+"):
            return _sql_depths(self.broker_url.removeprefix("sqla+"), names)
        return None


@lru_cache
def dispatcher_for(broker_url: str) -> JobDispatcher:
    """One dispatcher (and connection pool) per broker URL for the process."""
    return JobDispatcher(broker_url)


def _redis_messages(url: str, queues: Iterable[str]) -> list[dict[str, Any]]:
    client = redis.Redis.from_url(url)
    try:
        raw = [item for queue in queues for item in client.lrange(queue, 0, -1)]
        return [json.loads(item) for item in raw] + _redis_unacked(client)
    finally:
        client.close()


def _redis_unacked(client: redis.Redis) -> list[dict[str, Any]]:
    # An unacked entry is [message, exchange, routing key].
    return [json.loads(entry)[0] for entry in client.hvals(_REDIS_UNACKED)]


def _redis_depths(url: str, queues: list[str]) -> dict[str, int]:
    client = redis.Redis.from_url(url, socket_timeout=_PING_TIMEOUT_S,
                                  socket_connect_timeout=_PING_TIMEOUT_S)
    try:
        with client.pipeline(transaction=False) as pipe:
            for queue in queues:
                for suffix in _REDIS_PRIORITY_SUFFIXES:
                    pipe.llen(queue + suffix)
            lengths = pipe.execute()
    finally:
        client.close()
    per = len(_REDIS_PRIORITY_SUFFIXES)
    return {queue: sum(lengths[i * per:(i + 1) * per]) for i, queue in enumerate(queues)}


def _sql_depths(url: str, queues: list[str]) -> dict[str, int]:
    depths = dict.fromkeys(queues, 0)
    if not queues:
        return depths
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            rows = connection.execute(text(
                "SELECT q.name, count(*) FROM kombu_message m JOIN kombu_queue q "
                "ON m.queue_id = q.id WHERE q.name IN :names AND m.visible GROUP BY q.name"
            ).bindparams(bindparam("names", expanding=True)), {"names": queues}).all()
    except sqlalchemy.exc.OperationalError as err:  # no kombu tables yet: nothing was ever sent
        if "no such table" not in str(err):
            raise
        return depths
    finally:
        engine.dispose()
    depths.update({name: int(count) for name, count in rows})
    return depths


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


def _ids(messages: list[dict[str, Any]], task: str) -> set[uuid.UUID]:
    """Job ids of the `task` messages (Celery's message protocol 2: the job id is the first
    argument of both jobs.run and webhooks.deliver)."""
    ids = set()
    for message in messages:
        headers = message.get("headers", {})
        if headers.get("task") != task:
            continue
        try:
            args, _kwargs, _embed = json.loads(base64.b64decode(message["body"]))
            ids.add(uuid.UUID(str(args[0])))
        except (KeyError, ValueError, IndexError, TypeError):
            logger.warning("unreadable %s message %s", task, headers.get("id"))
    return ids
