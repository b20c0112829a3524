"""Jobs on a backend and at a precision registered by a plug-in (tests/support/stand_in.py: ONNX
Runtime's builder, runner and job strategy under the name "stand-in", and "half", converting as
fp16 does), end to end through a real worker (embedded, on the Redis broker): the API takes
them, the worker routes and runs them, the job's own process registers the plug-in from the
settings before it reads the config, and every stage reads their specs."""

from __future__ import annotations

import io
from collections.abc import Iterator

import numpy as np
import pytest

from optimizer.testing.models import model_bytes
from optimizer.testing.quantization_models import calibration_images, conv_stack
from tests.support.embedded_worker import EmbeddedWorker
from tests.support.stand_in import PLUGIN, registered

FAST = {"benchmark": {"warmup": 1, "iterations": 5, "measure_memory": False}}


@pytest.fixture
def stand_in(embedded: EmbeddedWorker) -> Iterator[EmbeddedWorker]:
    """The stand-in registered here (the API, the worker thread) and named in the settings the
    job's process is handed (it is a fresh interpreter: it registers the plug-in itself)."""
    with registered(), embedded.settings(plugins=(PLUGIN,)):
        yield embedded


def _calibration(embedded: EmbeddedWorker, images: np.ndarray) -> str:
    buffer = io.BytesIO()
    np.savez(buffer, input=images)
    response = embedded.client.post("/v1/datasets", params={"role": "calibration"},
                                    files={"file": ("cal.npz", buffer.getvalue())})
    assert response.status_code in (200, 201), response.text
    return str(response.json()["id"])


def test_an_int8_job_on_the_stand_in_quantizes_in_its_flavours_and_ships(
        stand_in: EmbeddedWorker) -> None:
    model = conv_stack(seed=31, size=16, blocks=1)
    model_id = stand_in.upload(model_bytes(model), "convnet.onnx")
    calibration = _calibration(stand_in, calibration_images(model, 8, seed=3))

    job = stand_in.wait(stand_in.submit(
        model_id, backend="stand-in", precision="int8", ort_intra_op_threads=1,
        quantization={"mode": "static", "method": "minmax", "calibration": calibration}, **FAST))

    assert job["status"] == "succeeded", job["error"]
    assert (job["config"]["backend"], job["backend"]) == ("stand-in", "stand-in")
    report = job["accuracy_report"]["quantization"]
    # The stand-in's spec copies ONNX Runtime's int8 flavours, its timing on the worker's CPU
    # and its node-precision report: each read from the spec, none by the backend's name.
    labels = [candidate["label"] for candidate in report["tried"]]
    assert "static onnxruntime-u8s8 minmax" in labels, labels
    assert report["shipped"] in ("int8", "fp32"), report["why"]
    if report["shipped"] == "int8":
        assert report["speed"]["intra_op_threads"] == 1
        assert {n["precision"] for n in report["node_precisions"]["nodes"]
                if n["op_type"] == "Conv"} == {"int8"}
    assert job["validation"]["passed"] is True
    assert job["outcome"]["asked"]["backend"] == "stand-in"
    assert any(a["kind"] == "engine" for a in job["artifacts"])


def test_a_search_job_on_the_stand_in_races_its_precision_and_ships_the_winner(
        stand_in: EmbeddedWorker) -> None:
    model_id = stand_in.upload(model_bytes(conv_stack(seed=32, size=16, blocks=1)), "convnet.onnx")

    refused = stand_in.client.post("/v1/jobs", json={
        "model_id": model_id, "backend": "stand-in", "search": {"precisions": ["bf16"]}})
    assert refused.status_code == 422
    assert refused.json()["detail"] == (
        "search.precisions: backend 'stand-in' does not build bf16; it builds fp32, half, int8 "
        "(the stand-in runs no bf16 (it is ONNX Runtime's CPU provider underneath))")

    job = stand_in.wait(stand_in.submit(
        model_id, backend="stand-in", validation={"samples": 2},
        search={"backends": ["stand-in"], "time_budget_s": 120, "pass_sets": False,
                "precisions": ["fp32", "half", "int8"]}, **FAST))

    assert job["status"] == "succeeded", job.get("error")
    report = job["search_report"]
    rows = {row["name"]: row for row in report["rows"]}
    assert {"fp32/all", "half/all"} <= set(rows), list(rows)
    assert rows["half/all"]["precision"] == "half"
    assert rows["half/all"]["outcome"] in {"won", "slower", "out_of_accuracy_budget"}, \
        rows["half/all"]
    assert rows["int8-static"]["outcome"] == "refused"
    assert "calibration" in rows["int8-static"]["reason"]
    # int8 has a dynamic form (its spec says): the convnet's classifier head takes it.
    assert rows["int8-dynamic/all"]["outcome"] in {"won", "slower", "out_of_accuracy_budget"}
    if report["winner"] is None:  # no candidate beat the original: it ships, saying why
        assert job["outcome"]["shipped"]["what"] == "original", job["outcome"]
    else:
        assert rows[report["winner"]]["outcome"] == "won"
        assert report["recipe"]["backend"] == "stand-in"
    assert any(a["kind"] == "engine" for a in job["artifacts"])
