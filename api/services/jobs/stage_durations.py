"""How long each stage of a job took (`job_stage_seconds`, for its document) and of the most
recently finished jobs (`StageDurations`, for the metrics), from their stored events.

A job's process records a "stage <name> started" event as it enters each stage
(core/db/job_state.start_stage); a stage lasts until the next one starts, and the last until
the job finished (`finished_at`, whatever the outcome). A stage entered twice (a fallback
round) counts once, with the time of both rounds. A finished job's events never change, so
its durations are computed once and kept while it stays in the window: a scrape reads events
only for jobs that finished since the last one.
"""

import threading
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from core.db.models import Job, JobEvent, JobStatus

__all__ = ["StageDurations", "StageTime", "job_stage_seconds", "stage_times"]

_FINAL = [JobStatus.SUCCEEDED.value, JobStatus.FAILED.value, JobStatus.CANCELLED.value]
_IN_CHUNK = 500  # job ids per IN (...) list: well under any database's parameter limit


@dataclass(frozen=True)
class StageTime:
    stage: str
    backend: str
    seconds: float


def stage_times(starts: Sequence[tuple[str, datetime]], finished_at: datetime
                ) -> dict[str, float]:
    """Seconds spent in each stage, from the (stage, started at) events in order and the
    job's end.

    >>> t = lambda s: datetime(2026, 1, 1, 0, 0, s)
    >>> stage_times([("load", t(0)), ("optimize", t(2)), ("load", t(5))], t(6))
    {'load': 3.0, 'optimize': 3.0}
    """
    seconds: dict[str, float] = {}
    if not starts:  # cancelled or failed before its first stage
        return seconds
    ends = [at for _, at in starts[1:]] + [finished_at]
    for (stage, started), ended in zip(starts, ends, strict=True):
        seconds[stage] = seconds.get(stage, 0.0) + max((ended - started).total_seconds(), 0.0)
    return seconds


def job_stage_seconds(events: Iterable[Mapping[str, Any]], finished_at: datetime | None, *,
                      now: datetime) -> dict[str, float]:
    """Seconds the job spent in each stage, from its events in order (each with `stage`,
    `message`, `created_at`); a stage still running lasts until `now`."""
    starts = [(event["stage"], event["created_at"]) for event in events
              if event["stage"] is not None and _opens_stage(event["stage"], event["message"])]
    return stage_times(starts, finished_at or now)


def _opens_stage(stage: str, message: str) -> bool:
    # the start_stage event; others in a stage (notes, the outcome) do not open one
    return message.startswith(f"stage {stage} started")


class StageDurations:
    """The stage times of the `window` most recently finished jobs; safe to share between
    threads (one scrape computes at a time)."""

    def __init__(self, window: int) -> None:
        self.window = window
        self._known: dict[uuid.UUID, list[StageTime]] = {}
        self._lock = threading.Lock()

    def collect(self, session: Session) -> list[StageTime]:
        with self._lock:
            recent = session.execute(
                select(Job.id, Job.config["backend"].as_string(), Job.finished_at)
                .where(Job.status.in_(_FINAL), Job.finished_at.is_not(None))
                .order_by(Job.finished_at.desc()).limit(self.window)).all()
            finished = {job_id: (backend or "unknown", at) for job_id, backend, at in recent}
            new = [job_id for job_id in finished if job_id not in self._known]
            self._known = {job_id: times for job_id, times in self._known.items()
                           if job_id in finished}
            starts = _stage_starts(session, new)
            for job_id in new:
                backend, finished_at = finished[job_id]
                self._known[job_id] = [
                    StageTime(stage, backend, seconds) for stage, seconds in
                    stage_times(starts.get(job_id, []), finished_at).items()]
            return [time for times in self._known.values() for time in times]


def _stage_starts(session: Session, job_ids: Iterable[uuid.UUID]
                  ) -> dict[uuid.UUID, list[tuple[str, datetime]]]:
    """Each job's (stage, started at) events, in the order they were recorded."""
    ids = list(job_ids)
    starts: dict[uuid.UUID, list[tuple[str, datetime]]] = {}
    for at in range(0, len(ids), _IN_CHUNK):
        rows = session.execute(
            select(JobEvent.job_id, JobEvent.stage, JobEvent.message, JobEvent.created_at)
            .where(JobEvent.job_id.in_(ids[at:at + _IN_CHUNK]), JobEvent.stage.is_not(None))
            .order_by(JobEvent.id)).all()
        for job_id, stage, message, created_at in rows:
            if stage is not None and _opens_stage(stage, message):
                starts.setdefault(job_id, []).append((stage, created_at))
    return starts
