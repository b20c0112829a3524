"""The build child's event file and the worker's relay of it to the job (writes to the job are
tested end to end in tests/e2e/test_tensorrt_worker.py; here a recording reporter stands in)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from optimizer.backends.tensorrt import LogLine
from worker.gpu.build_events import BuildEventRelay, BuildEventWriter


class RecordingReporter:
    def __init__(self) -> None:
        self.calls: list[tuple[list[str], float | None]] = []
        self.running = True

    def __call__(self, messages: Sequence[str], progress: float | None) -> bool:
        self.calls.append((list(messages), progress))
        return self.running

    @property
    def messages(self) -> list[str]:
        return [m for messages, _ in self.calls for m in messages]

    @property
    def progress(self) -> list[float]:
        return [p for _, p in self.calls if p is not None]


def _relay(tmp_path: Path, reporter: RecordingReporter, **options: object) -> BuildEventRelay:
    defaults: dict[str, object] = {"label": "TensorRT build", "progress_span": (0.2, 0.4),
                                   "progress_interval_s": 0.0, "status_interval_s": 3600.0}
    return BuildEventRelay(tmp_path / "events.jsonl", tmp_path / "build.log", report=reporter,
                           **{**defaults, **options})  # type: ignore[arg-type]


def test_warnings_become_events_and_every_line_goes_to_the_log(tmp_path: Path) -> None:
    reporter = RecordingReporter()
    writer = BuildEventWriter(tmp_path / "events.jsonl")
    with _relay(tmp_path, reporter) as relay:
        writer.log(LogLine("INFO", "parsing model.onnx"))
        writer.log(LogLine("WARNING", "weights are fp64; casting"))
        writer.log(LogLine("ERROR", "out of memory"))
        writer.log(LogLine("VERBOSE", "tactic 7"))
        assert relay.poll()
    writer.close()
    assert reporter.messages == ["TensorRT build warning: weights are fp64; casting",
                                 "TensorRT build error: out of memory"]
    log = (tmp_path / "build.log").read_text().splitlines()
    assert log == ["[INFO] parsing model.onnx", "[WARNING] weights are fp64; casting",
                   "[ERROR] out of memory", "[VERBOSE] tactic 7"]


def test_progress_is_scaled_into_the_stage_span_and_never_goes_back(tmp_path: Path) -> None:
    reporter = RecordingReporter()
    writer = BuildEventWriter(tmp_path / "events.jsonl")
    with _relay(tmp_path, reporter) as relay:
        writer.progress(0.5, "Timing tactics")
        relay.poll()
        writer.progress(0.25, "Building")  # a new top-level phase restarts at 0 in TensorRT
        relay.poll()
        writer.progress(1.0, "Serializing")
    writer.close()
    assert reporter.progress == [pytest.approx(0.3), pytest.approx(0.4)]


def test_a_line_still_being_written_waits_for_its_end(tmp_path: Path) -> None:
    reporter = RecordingReporter()
    events = tmp_path / "events.jsonl"
    with _relay(tmp_path, reporter) as relay:
        with events.open("a") as handle:
            handle.write('{"kind": "log", "severity": "WARNING", "mess')
            handle.flush()
            relay.poll()
            assert reporter.messages == []
            handle.write('age": "half then whole"}\n')
        relay.poll()
    assert reporter.messages == ["TensorRT build warning: half then whole"]


def test_events_beyond_the_limit_are_counted_not_sent(tmp_path: Path) -> None:
    reporter = RecordingReporter()
    writer = BuildEventWriter(tmp_path / "events.jsonl")
    with _relay(tmp_path, reporter, max_events=2):
        for index in range(5):
            writer.log(LogLine("WARNING", f"warning {index}"))
    writer.close()
    assert reporter.messages == [
        "TensorRT build warning: warning 0", "TensorRT build warning: warning 1",
        "TensorRT build: 3 more warning/error line(s) are in the build log artifact"]


def test_poll_says_stop_once_the_job_no_longer_runs(tmp_path: Path) -> None:
    reporter = RecordingReporter()
    with _relay(tmp_path, reporter, status_interval_s=0.0) as relay:
        assert relay.poll()
        reporter.running = False
        assert not relay.poll()
    assert reporter.calls and all(progress is None for _, progress in reporter.calls)


def test_nothing_written_yet_is_not_an_error(tmp_path: Path) -> None:
    reporter = RecordingReporter()
    with _relay(tmp_path, reporter) as relay:
        assert relay.poll()
    assert reporter.calls == []
