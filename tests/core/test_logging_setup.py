"""core/logging_setup.py: JSON lines with the request and job ids, or readable text."""

import io
import json
import logging
from collections.abc import Iterator

import pytest
from pydantic import ValidationError

from core.logging_setup import configure_logging, job_context, request_id_var
from core.settings import Settings


@pytest.fixture
def restore_root_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def _lines(stream: io.StringIO) -> list[str]:
    return stream.getvalue().splitlines()


@pytest.mark.usefixtures("restore_root_logging")
def test_json_lines_carry_ts_level_logger_message_and_the_job_id() -> None:
    stream = io.StringIO()
    configure_logging("json", role="worker", stream=stream)
    log = logging.getLogger("fuseforge.test")

    log.info("outside any job")
    with job_context("3f2a"):
        log.warning("stage %s started", "load", extra={"stage": "load"})
    log.info("after the job")

    first, inside, after = (json.loads(line) for line in _lines(stream))
    assert inside["message"] == "stage load started" and inside["level"] == "WARNING"
    assert inside["logger"] == "fuseforge.test" and inside["ts"].endswith("Z")
    assert inside["job_id"] == "3f2a" and inside["process"] == "worker"
    assert inside["stage"] == "load"  # extra= fields are kept
    assert "job_id" not in first and "job_id" not in after


@pytest.mark.usefixtures("restore_root_logging")
def test_json_exception_is_one_line_with_its_traceback_as_a_field() -> None:
    stream = io.StringIO()
    configure_logging("json", stream=stream)
    token = request_id_var.set("req-1")
    try:
        try:
            raise ValueError("bad\nvalue")
        except ValueError:
            logging.getLogger("fuseforge.test").exception("it broke")
    finally:
        request_id_var.reset(token)

    [line] = _lines(stream)
    entry = json.loads(line)
    assert entry["request_id"] == "req-1" and entry["message"] == "it broke"
    assert "Traceback" in entry["exc_info"] and "ValueError: bad" in entry["exc_info"]


@pytest.mark.usefixtures("restore_root_logging")
def test_text_lines_stay_readable_with_the_ids_at_the_end() -> None:
    stream = io.StringIO()
    configure_logging("text", role="job", stream=stream)

    with job_context("3f2a"):
        logging.getLogger("worker.pipeline.run").info("job %s failed", "3f2a")

    [line] = _lines(stream)
    assert line.endswith(" INFO [job] worker.pipeline.run: job 3f2a failed [job=3f2a]")
    with pytest.raises(json.JSONDecodeError):
        json.loads(line)


@pytest.mark.usefixtures("restore_root_logging")
def test_configuring_again_replaces_its_handler_and_a_basic_config_one() -> None:
    # what logging.basicConfig() installs, as a CLI command does before it knows the format
    logging.getLogger().addHandler(logging.StreamHandler())
    first, second = io.StringIO(), io.StringIO()
    configure_logging("text", stream=first)
    configure_logging("json", stream=second)

    logging.getLogger("fuseforge.test").warning("once")

    assert first.getvalue() == ""
    assert [json.loads(line)["message"] for line in _lines(second)] == ["once"]
    assert not [h for h in logging.getLogger().handlers if type(h) is logging.StreamHandler]


def test_an_unknown_log_format_is_refused_naming_the_setting(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FUSEFORGE_LOG_FORMAT", "yaml")

    with pytest.raises(ValidationError, match=r"log_format[\s\S]*'text' or 'json'"):
        Settings()
