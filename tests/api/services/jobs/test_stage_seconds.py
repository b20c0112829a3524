"""A job document's stage_seconds: the time in each stage, from the job's own events."""

from datetime import UTC, datetime

from api.services.jobs.stage_durations import job_stage_seconds


def _at(second: int) -> datetime:
    return datetime(2026, 1, 1, 0, 0, second, tzinfo=UTC)


EVENTS = [
    {"stage": None, "message": "queued", "created_at": _at(0)},
    {"stage": "load", "message": "stage load started", "created_at": _at(1)},
    {"stage": "load", "message": "loaded 8 samples", "created_at": _at(2)},  # a note: no stage
    {"stage": "optimize", "message": "stage optimize started", "created_at": _at(3)},
    {"stage": "validate", "message": "stage validate started", "created_at": _at(4)},
    {"stage": "optimize", "message": "stage optimize started (fallback: no passes)",
     "created_at": _at(6)},
]


def test_a_finished_jobs_stages_end_at_the_next_stage_and_at_its_end():
    assert job_stage_seconds(EVENTS, _at(9), now=_at(30)) == {
        "load": 2.0, "optimize": 4.0, "validate": 2.0}


def test_a_running_jobs_last_stage_lasts_until_now():
    assert job_stage_seconds(EVENTS, None, now=_at(7))["optimize"] == 2.0


def test_a_job_that_never_started_a_stage_has_none():
    assert job_stage_seconds(EVENTS[:1], None, now=_at(5)) == {}
