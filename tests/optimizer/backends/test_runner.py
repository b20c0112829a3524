"""runner_from_spec: a runner recreated from its spec behaves like the original."""

from __future__ import annotations

import json

import numpy as np
import pytest

from optimizer.backends.onnxruntime.runner import OnnxRuntimeRunner
from optimizer.backends.runner import RunnerSpec, runner_from_spec
from optimizer.errors import InternalError


def test_runner_from_spec_recreates_an_equivalent_runner_from_json(mlp_path):
    original = OnnxRuntimeRunner(mlp_path, optimization_level="extended", intra_op_threads=1)
    spec = RunnerSpec.from_dict(json.loads(json.dumps(original.spec().to_dict())))
    feed = {"input": np.ones((2, 16), np.float32)}

    with runner_from_spec(spec) as copy:
        assert copy.spec() == original.spec()
        np.testing.assert_array_equal(copy.infer(feed)["output"], original.infer(feed)["output"])


def test_runner_from_spec_rejects_an_unknown_backend(mlp_path):
    with pytest.raises(InternalError, match="backend 'no-such-backend', which this worker cannot run"):
        runner_from_spec(RunnerSpec(backend="no-such-backend", model_path=str(mlp_path)))


def test_runner_from_spec_rejects_options_the_backend_does_not_take(mlp_path):
    spec = RunnerSpec(backend="onnxruntime", model_path=str(mlp_path),
                      options={"precision": "fp16"})

    with pytest.raises(InternalError, match="do not fit backend 'onnxruntime'"):
        runner_from_spec(spec)
