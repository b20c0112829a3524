"""What GET /metrics reports, read from the sources of truth at scrape time.

The API may run several processes and the workers are others, so nothing here is an
in-process counter: each scrape asks the database (jobs, stage events, uploads, workers) and
the broker (queue depths), a few short queries, and the answer is reused for
`metrics.cache_s` (default 1 s) so a burst of scrapes costs one set. A source that cannot be
read leaves its metrics out and says so in `fuseforge_metrics_source_up{source}`; the others are
still reported.

Metrics (all gauges: each describes the state now, not a running count of this process):

- `fuseforge_jobs{status, backend}`: jobs in each status (every status of each backend, 0 too).
- `fuseforge_job_stage_duration_seconds{stage, backend}`: a gauge histogram of the time each
  stage took in the `metrics.stage_window_jobs` most recently finished jobs (a window, so
  `histogram_quantile` applies to it directly, without `rate`).
- `fuseforge_queue_depth{queue}`: messages waiting in each broker queue (Redis or the embedded
  SQL broker): cpu, gpu, webhooks, and each GPU queue an online worker consumes or a queued job targets.
- `fuseforge_stored_upload_bytes{kind}`, `fuseforge_stored_uploads{kind}`: stored models and
  datasets, in bytes and in number.
- `fuseforge_workers_online{queue}`: online workers consuming each queue (a worker's queues are
  its capabilities: cpu, gpu, gpu.sm90, gpu.h200).
- `fuseforge_webhook_deliveries{outcome}`: webhook delivery attempts recorded: delivered,
  retried (another attempt follows), failed (none follows).
- `fuseforge_metrics_source_up{source}`: 1 when the database / broker answered this scrape.
"""

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager

from prometheus_client.core import GaugeHistogramMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry
from sqlalchemy import case, func, select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from api.services.jobs.stage_durations import StageDurations, StageTime
from core.db.models import Dataset, Job, JobStatus, Model, WebhookDelivery, Worker
from core.db.types import utc_now
from core.db.worker_registry import online_clause
from core.dispatch import JobDispatcher
from core.queues import WEBHOOK_QUEUE, backend_queues, queue_for
from core.settings import MetricsSettings
from optimizer.registries.backends import BACKENDS

__all__ = ["STAGE_BUCKETS_S", "ServiceMetrics"]

logger = logging.getLogger(__name__)

Sessions = Callable[[], AbstractContextManager[Session]]

# Stages last from a fraction of a second (load of a small model) to an hour (engine builds).
STAGE_BUCKETS_S = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)


class ServiceMetrics:
    """The app's metrics: `registry(sessions, dispatcher)` is what the route encodes."""

    def __init__(self, settings: MetricsSettings) -> None:
        self._cache_s = settings.cache_s
        self._stages = StageDurations(settings.stage_window_jobs)
        self._families: tuple[float, list[Metric]] | None = None
        self._lock = threading.Lock()

    def registry(self, sessions: Sessions, dispatcher: JobDispatcher) -> CollectorRegistry:
        """A registry holding this scrape's metrics (computed now, or reused if fresh)."""
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Snapshot(self._families_now(sessions, dispatcher)))
        return registry

    def _families_now(self, sessions: Sessions, dispatcher: JobDispatcher) -> list[Metric]:
        with self._lock:  # concurrent scrapes wait for one set of queries
            cached = self._families
            if cached is not None and time.monotonic() - cached[0] <= self._cache_s:
                return cached[1]
            families = list(self._collect(sessions, dispatcher))
            self._families = (time.monotonic(), families)
            return families

    def _collect(self, sessions: Sessions, dispatcher: JobDispatcher) -> Iterator[Metric]:
        up = GaugeMetricFamily("fuseforge_metrics_source_up",
                               "1 when the source answered this scrape; 0 leaves its metrics out",
                               labels=["source"])
        queues: set[str] = {*backend_queues(), WEBHOOK_QUEUE}
        try:
            with sessions() as session:  # all of them or none: a half-read set would mislead
                consumed = _online_worker_queues(session)
                from_database = [
                    _jobs_by_status(session),
                    _stage_histogram(self._stages.collect(session)),
                    *_stored_uploads(session),
                    _workers_online(consumed),
                    *_webhook_deliveries(session),
                ]
                queues |= _known_queues(session, consumed)
            yield from from_database
            up.add_metric(["database"], 1)
        except SQLAlchemyError as err:  # report the others, and say this one is down
            logger.warning("metrics: the database could not be read: %s: %s",
                           type(err).__name__, err)
            up.add_metric(["database"], 0)
        try:
            depths = dispatcher.queue_depths(queues)
        except Exception as err:  # kombu/redis raise transport-specific errors
            logger.warning("metrics: the broker could not be read: %s: %s", type(err).__name__, err)
            up.add_metric(["broker"], 0)
        else:
            up.add_metric(["broker"], 1)
            if depths is not None:  # None: a broker we cannot look into
                yield _queue_depths(depths)
        yield up


class _Snapshot(Collector):
    """Hands the registry the families of one scrape."""

    def __init__(self, families: list[Metric]) -> None:
        self._families = families

    def collect(self) -> Iterable[Metric]:
        return self._families


def _jobs_by_status(session: Session) -> Metric:
    backend = Job.config["backend"].as_string()
    counts = {(status, name or "unknown"): count for status, name, count in session.execute(
        select(Job.status, backend, func.count()).group_by(Job.status, backend))}
    for known in BACKENDS:  # every series exists from the start, at 0
        for status in JobStatus:
            counts.setdefault((status.value, known.value), 0)
    family = GaugeMetricFamily("fuseforge_jobs", "Jobs in each status, by backend",
                               labels=["status", "backend"])
    for (status, name), count in sorted(counts.items()):
        family.add_metric([status, name], count)
    return family


def _stage_histogram(times: list[StageTime]) -> Metric:
    family = GaugeHistogramMetricFamily(
        "fuseforge_job_stage_duration_seconds",
        "Time each stage took in the most recently finished jobs (FUSEFORGE_METRICS__"
        "STAGE_WINDOW_JOBS of them)", labels=["stage", "backend"])
    by_series: dict[tuple[str, str], list[float]] = {}
    for time_ in times:
        by_series.setdefault((time_.stage, time_.backend), []).append(time_.seconds)
    for (stage, backend), seconds in sorted(by_series.items()):
        buckets = [(_le(bound), sum(1 for s in seconds if s <= bound))
                   for bound in STAGE_BUCKETS_S]
        buckets.append(("+Inf", len(seconds)))
        family.add_metric([stage, backend], buckets, gsum_value=sum(seconds))
    return family


def _stored_uploads(session: Session) -> Iterator[Metric]:
    size = GaugeMetricFamily("fuseforge_stored_upload_bytes",
                             "Bytes of the stored uploads, by kind", labels=["kind"])
    count = GaugeMetricFamily("fuseforge_stored_uploads", "Stored uploads, by kind",
                              labels=["kind"])
    for kind, table in (("model", Model), ("dataset", Dataset)):
        number, total = session.execute(
            select(func.count(), func.coalesce(func.sum(table.size_bytes), 0))).one()
        size.add_metric([kind], total)
        count.add_metric([kind], number)
    yield size
    yield count


def _le(bound: float) -> str:
    """A bucket's bound as prometheus_client writes them: 1 → "1.0" (all bounds are < 1e6)."""
    return repr(float(bound))


def _online_worker_queues(session: Session) -> list[list[str]]:
    """The queues of each online worker."""
    return [list(queues) for queues in session.scalars(
        select(Worker.queues).where(online_clause(utc_now())))]


def _workers_online(consumed: list[list[str]]) -> Metric:
    per_queue = dict.fromkeys(backend_queues(), 0)
    for queues in consumed:
        for queue in set(queues):
            per_queue[queue] = per_queue.get(queue, 0) + 1
    family = GaugeMetricFamily("fuseforge_workers_online",
                               "Online workers consuming each queue (their capabilities)",
                               labels=["queue"])
    for queue, number in sorted(per_queue.items()):
        family.add_metric([queue], number)
    return family


def _known_queues(session: Session, consumed: list[list[str]]) -> set[str]:
    """The queues jobs may wait in besides the backends' own ("cpu", "gpu"): those online
    workers consume and those queued jobs' `target_gpu` sends them to."""
    queues = {queue for worker_queues in consumed for queue in worker_queues}
    backend, target_gpu = Job.config["backend"].as_string(), Job.config["target_gpu"].as_string()
    targets = session.execute(select(backend, target_gpu)
                              .where(Job.status == JobStatus.QUEUED.value)
                              .group_by(backend, target_gpu))
    for backend, target_gpu in targets:
        if backend in BACKENDS:
            queues.add(queue_for(backend, target_gpu))
    return queues


def _queue_depths(depths: dict[str, int]) -> Metric:
    family = GaugeMetricFamily("fuseforge_queue_depth", "Messages waiting in each broker queue",
                               labels=["queue"])
    for queue, depth in sorted(depths.items()):
        family.add_metric([queue], depth)
    return family


def _webhook_deliveries(session: Session) -> Iterator[Metric]:
    """Webhook delivery attempts by outcome: `delivered` (2xx), `retried` (failed, another
    attempt follows), `failed` (failed, and none follows: refused, a 4xx or out of attempts)."""
    outcome = case((WebhookDelivery.error.is_(None), "delivered"),
                   (WebhookDelivery.final, "failed"), else_="retried")
    counts = dict.fromkeys(("delivered", "retried", "failed"), 0)
    counts.update({name: number for name, number in session.execute(
        select(outcome, func.count()).group_by(outcome))})
    family = GaugeMetricFamily("fuseforge_webhook_deliveries",
                               "Webhook delivery attempts recorded, by outcome",
                               labels=["outcome"])
    for name, number in counts.items():
        family.add_metric([name], number)
    yield family
