"""The Celery application. The API imports it to send tasks by name; only workers load the tasks."""

from datetime import timedelta

from celery import Celery

from api.settings import get_settings

__all__ = ["JOB_QUEUE_BY_BACKEND", "RUN_JOB_TASK", "SWEEP_TASK", "celery_app"]

RUN_JOB_TASK = "jobs.run"
SWEEP_TASK = "jobs.sweep_stale"
# CPU backends run on CPU workers; TensorRT jobs will go to the GPU queue.
JOB_QUEUE_BY_BACKEND = {"onnxruntime": "cpu", "tensorrt": "gpu"}


def _make_celery_app() -> Celery:
    settings = get_settings()
    app = Celery("fuseforge", broker=settings.resolved_broker_url, include=["worker.tasks.run_job"])
    app.conf.update(
        task_acks_late=True,  # a message is acked only after the job ran; claim() makes reruns safe
        task_reject_on_worker_lost=True,
        task_ignore_result=True,  # job state lives in the database, never in a result backend
        worker_prefetch_multiplier=1,
        task_default_queue="cpu",
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
        beat_schedule_filename=str(settings.data_dir / "celerybeat-schedule"),
        beat_schedule={
            "sweep-stale-jobs": {
                "task": SWEEP_TASK,
                "schedule": timedelta(seconds=settings.jobs.heartbeat_interval_s * 2),
                "options": {"queue": "cpu"},
            }
        },
    )
    if app.conf.broker_url.startswith(("redis://", "rediss://")):
        # Redis re-sends an unacked message after this; a job may legitimately run this long.
        app.conf.broker_transport_options = {"visibility_timeout": settings.jobs.max_runtime_s + 600}
    return app


celery_app = _make_celery_app()
