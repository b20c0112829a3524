"""BuildLog: TensorRT's log lines filtered by severity, forwarded to the job, never raising."""

from __future__ import annotations

import pytest

from optimizer.backends.tensorrt.logger import BuildLog, LogLine


def test_lines_below_min_severity_are_dropped_and_counted():
    log = BuildLog(min_severity="WARNING")

    for severity in ("VERBOSE", "INFO", "WARNING", "ERROR", "INTERNAL_ERROR"):
        log.record(severity, severity.lower())

    assert [line.severity for line in log.lines] == ["WARNING", "ERROR", "INTERNAL_ERROR"]
    assert log.dropped == 2


def test_kept_lines_reach_the_job_callback_in_order():
    seen: list[LogLine] = []
    log = BuildLog(seen.append)

    log.record("INFO", "Parsing model")
    log.record("WARNING", "Unused input")

    assert seen == [LogLine("INFO", "Parsing model"), LogLine("WARNING", "Unused input")]
    assert seen[0].to_dict() == {"severity": "INFO", "message": "Parsing model"}


def test_errors_survive_a_flood_of_later_lines():
    log = BuildLog(keep=5)
    log.record("ERROR", "Out of memory in tactic 12")

    for index in range(100):
        log.record("INFO", f"line {index}")

    assert len(log.lines) == 5
    assert log.error_text() == "Out of memory in tactic 12"


def test_a_failing_callback_is_recorded_not_raised_and_not_called_again():
    calls = []

    def broken(line: LogLine) -> None:
        calls.append(line)
        raise RuntimeError("database is down")

    log = BuildLog(broken)
    log.record("INFO", "one")
    log.record("INFO", "two")

    assert len(calls) == 1
    assert isinstance(log.callback_error, RuntimeError)
    assert [line.message for line in log.lines] == ["one", "two"]


def test_unknown_severity_is_kept_as_info():
    log = BuildLog()
    log.record("NOTICE", "odd")

    assert log.lines == (LogLine("INFO", "odd"),)


def test_bad_min_severity_is_refused():
    with pytest.raises(ValueError, match="min_severity"):
        BuildLog(min_severity="LOUD")
