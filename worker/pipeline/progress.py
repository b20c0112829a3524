"""Move a running job from stage to stage, and stop the run once the job no longer runs."""

from worker.pipeline.heartbeat import JobHeartbeat
from worker.pipeline.recorder import JobRecorder
from worker.pipeline.stages import ProgressSpan, span_of

__all__ = ["JobStopped", "StageProgress"]


class JobStopped(Exception):
    """The job was cancelled or swept while it ran: the run stops and records nothing more."""


class StageProgress:
    def __init__(self, recorder: JobRecorder, heartbeat: JobHeartbeat) -> None:
        self._recorder = recorder
        self._heartbeat = heartbeat
        self._reached = 0.0

    def enter(self, stage: str, note: str | None = None) -> ProgressSpan:
        """Record that the job entered `stage`; the span of progress it may fill.

        The job's progress never goes back: a fallback round that re-enters `optimize` after
        `validate` keeps the progress already reached (its events say which round it is).

        Raises:
            JobStopped: the job was cancelled (or swept) meanwhile.
        """
        if not self._heartbeat.still_running:
            raise JobStopped
        span = span_of(stage)
        progress = max(span.start, self._reached)
        if not self._recorder.start_stage(stage, progress, note):
            raise JobStopped
        self._reached = progress
        return ProgressSpan(progress, max(span.end, progress))
