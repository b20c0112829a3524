"""measure_peak_memory_mb: a runner's memory, measured in a child process."""

from __future__ import annotations

import numpy as np
import pytest

from optimizer.backends.onnxruntime.runner import OnnxRuntimeRunner
from optimizer.backends.runner import RunnerSpec
from optimizer.errors import InternalError
from optimizer.measure.memory_probe import measure_peak_memory_mb

FEEDS = {"input": np.zeros((1, 3, 32, 32), np.float32)}


def test_measure_peak_memory_mb_is_positive_for_a_small_cnn(cnn_path, tmp_path, monkeypatch):
    spec = OnnxRuntimeRunner(cnn_path).spec()
    # The child must find this package even when the worker runs from another folder.
    monkeypatch.chdir(tmp_path)

    peak_mb = measure_peak_memory_mb(spec, FEEDS, iterations=2)

    assert 0 < peak_mb < 1024


def test_measure_peak_memory_mb_raises_internal_error_when_the_child_fails(cnn_path):
    spec = RunnerSpec(backend="no-such-backend", model_path=str(cnn_path))

    with pytest.raises(InternalError,
                       match="exited with status 1: InternalError: .*'no-such-backend'"):
        measure_peak_memory_mb(spec, FEEDS)


def test_measurement_ignores_the_size_of_the_process_that_asks(cnn_path):
    # Linux carries ru_maxrss across execve: a probe started by a large worker must not
    # report the worker's size as the model's.
    ballast = np.ones(300 * 2**20 // 8)  # 300 MiB resident here
    ballast[::512] = 2.0
    spec = OnnxRuntimeRunner(cnn_path).spec()

    peak_mb = measure_peak_memory_mb(spec, FEEDS, iterations=2)

    assert 0 < peak_mb < 150
    del ballast
