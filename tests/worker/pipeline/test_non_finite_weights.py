"""A model whose weights hold NaN or infinity is valid ONNX: its upload is taken with a warning
naming the tensors, its job says so in its events, and validation holds the engine to the
original's own NaNs."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper

from optimizer.testing.models import model_bytes, small_cnn
from tests.support.embedded_worker import EmbeddedWorker

FAST = {"benchmark": {"warmup": 1, "iterations": 3, "measure_memory": False},
        "validation": {"samples": 2}}


def _with_nan_weights() -> onnx.ModelProto:
    model = small_cnn(seed=21)
    weight = model.graph.initializer[0]
    values = numpy_helper.to_array(weight).copy()
    values.flat[:3] = [np.nan, np.inf, -np.inf]
    weight.CopyFrom(numpy_helper.from_array(values, weight.name))
    return model


def test_nan_weights_are_a_warning_on_the_upload_and_on_the_job(
        embedded: EmbeddedWorker) -> None:
    response = embedded.client.post("/v1/models", files={
        "file": ("nan.onnx", model_bytes(_with_nan_weights()))})
    assert response.status_code == 201, response.text
    [warning] = response.json()["warnings"]
    assert "'conv1.w': 1 NaN, 2 infinite of" in warning
    assert embedded.client.get(f"/v1/models/{response.json()['id']}").json()["warnings"] == [
        warning]

    job = embedded.wait(embedded.submit(response.json()["id"], **FAST))

    notes = [e["message"] for e in job["events"] if e["message"].startswith("warning: ")]
    assert notes and "hold NaN or infinite values" in notes[0], job["events"]
    # the engine computes the original's NaNs, no more: it validates (a NaN the original does
    # not produce fails: tests/optimizer/validation)
    assert job["status"] == "succeeded", job["error"]
    assert job["validation"]["passed"] is True


def test_a_clean_models_upload_has_no_warning(embedded: EmbeddedWorker) -> None:
    response = embedded.client.post("/v1/models", files={
        "file": ("clean.onnx", model_bytes(small_cnn(seed=22)))})
    assert response.status_code == 201, response.text
    assert response.json()["warnings"] == []
