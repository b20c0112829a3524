"""The worker's Celery application: task routing, its log lines (FUSEFORGE_LOG_FORMAT, the job
id on each line of a job), and the worker's start-up and shutdown (choosing its GPU queues,
registering it in the `workers` table). The stale-job sweep is the
janitor's (worker/janitor.py), a process of its own.

Only workers load it; the API sends tasks by name through its own producer (core/dispatch.py).
Queue and task names are core/queues.py's.
"""

import logging
from typing import Any

from celery import Celery
from celery.signals import (
    celeryd_after_setup,
    setup_logging,
    task_postrun,
    task_prerun,
    worker_process_init,
    worker_ready,
    worker_shutdown,
)

from core.logging_setup import configure_logging, job_id_var
from core.plugins import load_plugins
from core.queues import (
    CPU_QUEUE,
    DELIVER_WEBHOOK_TASK,
    RUN_JOB_TASK,
    WEBHOOK_QUEUE,
    queue_backend,
    worker_queues,
)
from core.settings import Settings, get_settings
from worker.registration import WorkerHeartbeat
from worker.runtime import current_runtime
from worker.supervision.job_template import warm_job_template

__all__ = ["celery_app", "make_celery_app"]

logger = logging.getLogger(__name__)

_SQL_BROKER_POLL_S = 0.02


def make_celery_app(settings: Settings) -> Celery:
    """The consuming app for `settings`' broker, with the worker's task modules."""
    load_plugins(settings.plugins)  # before the queues are chosen from the backends' specs
    app = Celery("fuseforge", broker=settings.resolved_broker_url,
                 include=["worker.tasks.run_job", "worker.tasks.deliver_webhook"])
    app.conf.update(
        task_acks_late=True,  # a message is acked only after the job ran; claim() makes reruns safe
        task_reject_on_worker_lost=True,
        task_ignore_result=True,  # job state lives in the database, never in a result backend
        worker_prefetch_multiplier=1,
        task_default_queue=CPU_QUEUE,
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
    )
    if app.conf.broker_url.startswith(("redis://", "rediss://")):
        # Redis re-sends an unacked message after this; a job may legitimately run this long.
        app.conf.broker_transport_options = {"visibility_timeout": settings.jobs.max_runtime_s + 600}
    elif app.conf.broker_url.startswith("sqla+"):
        # kombu's SQL transport polls its table, once a second by default: half a second of
        # waiting for every job. A small SQLite query this often costs next to nothing. Its
        # transport_options all go to create_engine, so the interval is set on the class.
        from kombu.transport import sqlalchemy as sql_transport

        sql_transport.Transport.polling_interval = _SQL_BROKER_POLL_S
    return app


celery_app = make_celery_app(get_settings())

_heartbeat: list[WorkerHeartbeat] = []  # this process's, once the worker is ready


def _choose_queues(sender: str, instance: Any, **_: Any) -> None:
    """Detect the host's capabilities once, and fit the GPU queues to them (before consuming)."""
    capabilities = current_runtime().capabilities
    queues = instance.app.amqp.queues
    add, drop = worker_queues(queues.consume_from.keys(), capabilities)
    for name in add:
        queues.select_add(name)
    if WEBHOOK_QUEUE not in queues.consume_from:
        queues.select_add(WEBHOOK_QUEUE)  # any worker delivers webhooks
    for name in drop:
        queues.deselect(name)
    # A host without the GPU a backend needs is an expected state (every CPU worker started by
    # `fuseforge run`), not an error: said once, plainly. Only a worker left with no job queue
    # at all (started for GPU queues alone on a host that cannot serve them) warns.
    serves_jobs = any(name != WEBHOOK_QUEUE for name in queues.consume_from)
    for label, names in _by_backend(drop).items():
        logger.log(
            logging.INFO if serves_jobs else logging.WARNING,
            "worker %s takes no %s jobs: this host cannot build %s engines (its capabilities: "
            "%s). They wait in queue %s for a worker that can%s.",
            sender, label, label, capabilities.describe(), ", ".join(names),
            "" if serves_jobs else "; this worker was given no other job queue, so it only "
            "delivers webhooks",
        )
    logger.info(
        "worker %s capabilities: %s; queues: %s",
        sender, capabilities.describe(), ", ".join(sorted(queues.consume_from)),
    )


def _by_backend(queues: list[str]) -> dict[str, list[str]]:
    """Dropped queues grouped by the label of the backend they belong to."""
    grouped: dict[str, list[str]] = {}
    for name in queues:
        spec = queue_backend(name)
        grouped.setdefault(spec.label if spec else name, []).append(name)
    return grouped


def _start_heartbeat(sender: Any, **_: Any) -> None:
    """Record the worker in the `workers` table and keep its heartbeat fresh (main process only)."""
    if _heartbeat:
        return
    runtime = current_runtime()
    beat = WorkerHeartbeat(
        sender.hostname,
        sorted(sender.app.amqp.queues.consume_from),
        runtime.capabilities,
        database_url=runtime.settings.resolved_database_url,
        interval_s=runtime.settings.jobs.heartbeat_interval_s,
    )
    beat.start()
    _heartbeat.append(beat)


def _stop_heartbeat(**_: Any) -> None:
    while _heartbeat:
        _heartbeat.pop().stop()


def _setup_logging(loglevel: int | str | None = None, **_: Any) -> None:
    """Celery leaves logging alone when this signal has a receiver: ours, in the shared format."""
    configure_logging(get_settings().log_format, role="worker", level=loglevel or logging.INFO)


_job_tokens: dict[str, Any] = {}  # task id → the job id's context token, while the task runs


def _enter_job(task_id: str, task: Any, args: Any = (), **_: Any) -> None:
    """Lines logged while a job's task (its run, its webhook) runs carry its job id, Celery's
    own included."""
    if task.name in (RUN_JOB_TASK, DELIVER_WEBHOOK_TASK) and args:
        _job_tokens[task_id] = job_id_var.set(str(args[0]))


def _leave_job(task_id: str, **_: Any) -> None:
    token = _job_tokens.pop(task_id, None)
    if token is not None:
        job_id_var.reset(token)


setup_logging.connect(_setup_logging)
task_prerun.connect(_enter_job)
# Each pool process starts its jobs' template now, so that its first job does not wait for the
# imports (a solo pool's starts with that first job).
worker_process_init.connect(lambda **_: warm_job_template(), weak=False)
task_postrun.connect(_leave_job)
celeryd_after_setup.connect(_choose_queues)
worker_ready.connect(_start_heartbeat)
worker_shutdown.connect(_stop_heartbeat)
