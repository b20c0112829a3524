"""core.reports: one declaration of the reports a job stores, its columns and its JSON."""

import math

import numpy as np
from sqlalchemy import JSON

from api.schemas.jobs import JobRead
from core.db.models import Job
from core.reports import REPORT_COLUMNS, AccuracyReport, EngineReport, JobReports


def test_every_report_section_is_a_json_column_of_jobs_named_alike():
    assert REPORT_COLUMNS == ("fusion_report", "accuracy_report", "engine_report",
                              "profile_report", "search_report", "stage_memory")
    for column in REPORT_COLUMNS:
        assert isinstance(Job.__table__.c[column].type, JSON)


def test_job_read_declares_every_report_section():
    for column in REPORT_COLUMNS:
        assert JobRead.model_fields[column].annotation == JobReports.model_fields[column].annotation


def test_a_column_stores_only_what_the_run_set_and_the_api_shows_every_field():
    reports = JobReports(accuracy_report=AccuracyReport(blame="rule X", localization=None))
    reports.accuracy().passed_first_time = False
    assert reports.columns()["accuracy_report"] == {
        "blame": "rule X", "localization": None, "passed_first_time": False}
    shown = reports.model_dump()["accuracy_report"]
    assert set(shown) == set(AccuracyReport.model_fields) and shown["bisection"] is None


def test_update_takes_the_later_stages_fields():
    accuracy = AccuracyReport(precision={"converted": 3}, blame="first")
    accuracy.update(AccuracyReport(blame="second", bisection={"culprits": []}))
    assert accuracy.model_dump(exclude_unset=True) == {
        "precision": {"converted": 3}, "blame": "second", "bisection": {"culprits": []}}


def test_columns_are_strict_json_and_none_for_what_never_ran():
    reports = JobReports(engine_report=EngineReport(metadata={"size": np.int64(3),
                                                              "build_s": math.nan}))
    reports.accuracy()  # started, but nothing set
    assert reports.columns() == {"fusion_report": None, "accuracy_report": None,
                                 "engine_report": {"metadata": {"size": 3, "build_s": None}},
                                 "profile_report": None, "search_report": None,
                                 "stage_memory": None}


def test_a_stored_report_reads_back_keys_an_older_worker_wrote_included():
    stored = {"bisection": {"culprits": [["r"]]}, "blame": "r", "retired_key": 1}
    read = JobReports.model_validate({"accuracy_report": stored})
    assert read.columns()["accuracy_report"] == stored
    assert read.model_dump()["accuracy_report"]["retired_key"] == 1
