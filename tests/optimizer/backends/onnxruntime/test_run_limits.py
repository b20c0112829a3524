"""run_limits: a run of a model with a Loop is stopped at its limit, naming the Loop; a model
without one runs untimed."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from optimizer.backends.onnxruntime.run_limits import (
    LATER_RUN_FLOOR_S,
    RunLimit,
    file_has_loop,
    model_has_loop,
    set_first_run_limit,
)
from optimizer.backends.onnxruntime.runner import OnnxRuntimeRunner
from optimizer.errors import InferenceTimeLimitError
from optimizer.model_writer import save_model
from optimizer.testing.models import mlp
from tests.support.hostile_models import data_dependent_endless_loop, loop_of_input_trips

_X = {"x": np.zeros(1, np.float32)}


@pytest.fixture
def short_first_runs() -> Iterator[None]:
    set_first_run_limit(0.5)
    yield
    set_first_run_limit(30.0)


def _session(model: onnx.ModelProto) -> ort.InferenceSession:
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def test_an_endless_loop_is_stopped_at_the_first_run_limit_naming_the_loop() -> None:
    session = _session(data_dependent_endless_loop())
    started = time.monotonic()

    with pytest.raises(InferenceTimeLimitError,
                       match=r"stopped running the loop after 0\.5 s in Loop node 'forever' "
                             r"\(the limit: no run of it had finished yet"):
        RunLimit(first_run_s=0.5).run(session, None, _X, what="the loop")

    assert time.monotonic() - started < 5  # stopped, not run to any stage limit


def test_later_runs_are_stopped_at_a_multiple_of_the_slowest_finished_run() -> None:
    session, limit = _session(loop_of_input_trips()), RunLimit(first_run_s=60)
    (y,) = limit.run(session, None, {**_X, "trips": np.array(100, np.int64)})
    assert y.tolist() == [100.0]
    assert limit.seconds() == LATER_RUN_FLOOR_S  # 20x well under a millisecond

    started = time.monotonic()
    with pytest.raises(InferenceTimeLimitError, match=r"after 2 s in Loop node 'forever' \(the "
                                                      r"limit: 20x its slowest earlier run"):
        limit.run(session, None, {**_X, "trips": np.array(2**40, np.int64)})
    assert time.monotonic() - started < 10


def test_runs_stopped_at_once_each_stop_at_their_own_limit() -> None:
    session = _session(data_dependent_endless_loop())
    stopped: dict[float, float] = {}

    def run(seconds: float) -> None:
        started = time.monotonic()
        with pytest.raises(InferenceTimeLimitError):
            RunLimit(first_run_s=seconds).run(session, None, _X)
        stopped[seconds] = time.monotonic() - started

    threads = [threading.Thread(target=run, args=(s,)) for s in (1.5, 0.3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=20)

    assert sorted(stopped) == [0.3, 1.5]
    assert stopped[0.3] < 1.2 <= stopped[1.5] < 6


def test_a_run_that_fails_otherwise_raises_what_onnx_runtime_raised() -> None:
    session = _session(loop_of_input_trips())

    with pytest.raises(Exception, match="trips") as raised:
        RunLimit().run(session, None, _X)  # "trips" missing

    assert not isinstance(raised.value, InferenceTimeLimitError)


def test_the_runner_stops_an_endless_loop_and_leaves_other_models_untimed(
        tmp_path: Path, short_first_runs: None) -> None:
    loop_path, mlp_path = tmp_path / "loop.onnx", tmp_path / "mlp.onnx"
    onnx.save(data_dependent_endless_loop(), loop_path)
    onnx.save(mlp(), mlp_path)

    assert file_has_loop(loop_path) and not file_has_loop(mlp_path)
    with OnnxRuntimeRunner(loop_path) as runner, pytest.raises(
            InferenceTimeLimitError, match=r"model 'loop.onnx' after 0\.5 s in Loop node "
                                           r"'forever'.*FUSEFORGE_JOBS__FIRST_RUN_LIMIT_S"):
        runner.infer(_X)


def test_a_model_with_an_endless_loop_is_not_written(tmp_path: Path,
                                                     short_first_runs: None) -> None:
    model = data_dependent_endless_loop()
    assert model_has_loop(model) and not model_has_loop(mlp())

    with pytest.raises(InferenceTimeLimitError, match="Loop node 'forever'"):
        save_model(model, tmp_path / "loop.onnx", what="the static model")

    assert list(tmp_path.iterdir()) == []


def test_the_loop_op_type_is_found_across_a_read_boundary(tmp_path: Path) -> None:
    marker = b"\x22\x04Loop"
    straddling, absent = tmp_path / "straddling.bin", tmp_path / "absent.bin"
    straddling.write_bytes(b"\0" * (2**24 - 3) + marker)
    absent.write_bytes(b"\0" * (2**24 - 3) + b"\x22\x04Lo0p")

    assert file_has_loop(straddling) and not file_has_loop(absent)


def test_a_first_run_limit_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        set_first_run_limit(0)
