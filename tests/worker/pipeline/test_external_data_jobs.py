"""A model uploaded with its external data files (one tar) runs the whole pipeline: the worker
unpacks the stored archive into the job's scratch folder and every stage reads the weights
from there; a stored archive changed since its upload is refused, not unpacked."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from optimizer.testing.block_stack import block_stack
from optimizer.testing.external_data_models import saved_with_external_data
from tests.support.embedded_worker import EmbeddedWorker
from tests.support.model_archives import archived

FAST_BENCHMARK = {"warmup": 1, "iterations": 3, "measure_memory": False}
SHAPES = {"input": [1, 8, 32]}


def _uploaded(embedded: EmbeddedWorker, folder: Path, seed: int) -> tuple[str, bytes]:
    saved_with_external_data(folder, block_stack(2, hidden=32, seed=seed))
    data = archived(folder)
    return embedded.upload(data, "blocks.tar"), data


def test_a_model_with_its_data_files_is_optimized_validated_and_benchmarked(
        embedded: EmbeddedWorker, tmp_path: Path) -> None:
    model_id, _ = _uploaded(embedded, tmp_path / "model", seed=5)
    job = embedded.wait(embedded.submit(model_id, backend="onnxruntime", input_shapes=SHAPES,
                                        benchmark=FAST_BENCHMARK))

    assert job["status"] == "succeeded", job["error"]
    assert job["validation"]["passed"] is True
    assert {b["variant"] for b in job["benchmarks"]} >= {"original", "engine"}
    fused = job["fusion_report"]
    assert fused["nodes_after"] < fused["nodes_before"], fused  # its LayerNorms were fused
    assert set(job["stage_memory"]["peak_rss_mb"]) >= {"load", "optimize", "validate"}
    # Every model it wrote keeps its weights in a data file of its own, stored beside it.
    names = {a["name"] for a in job["artifacts"]}
    assert {"engine.onnx", "engine.onnx.data", "fused.onnx", "fused.onnx.data"} <= names
    engine_dir = tmp_path / "engine"  # per file, or every artifact in one tar
    engine_dir.mkdir()
    for name in ("engine.onnx", "engine.onnx.data"):
        answer = embedded.client.get(f"/v1/jobs/{job['id']}/artifacts/{name}")
        assert answer.status_code == 200
        (engine_dir / name).write_bytes(answer.content)
    archive = embedded.client.get(f"/v1/jobs/{job['id']}/artifacts.tar")
    assert archive.status_code == 200
    assert int(archive.headers["content-length"]) == len(archive.content)
    with tarfile.open(fileobj=io.BytesIO(archive.content)) as tar:
        assert sorted(tar.getnames()) == sorted(names)
        for name in ("engine.onnx", "engine.onnx.data"):
            member = tar.extractfile(name)
            assert member is not None and member.read() == (engine_dir / name).read_bytes()
    engine = onnx.load(engine_dir / "engine.onnx", load_external_data=False)
    assert any(t.data_location == onnx.TensorProto.EXTERNAL for t in engine.graph.initializer)
    session = ort.InferenceSession(str(engine_dir / "engine.onnx"),
                                   providers=["CPUExecutionProvider"])
    (out,) = session.run(None, {"input": np.ones(SHAPES["input"], np.float32)})
    assert out.shape == tuple(SHAPES["input"]) and np.isfinite(out).all()
    assert not (embedded.runtime.settings.scratch_dir / job["id"]).exists()


def test_a_stored_archive_changed_to_hold_a_symlink_fails_the_job_unpacked_nothing(
        embedded: EmbeddedWorker, tmp_path: Path) -> None:
    model_id, data = _uploaded(embedded, tmp_path / "model", seed=6)
    stored = next(p for p in embedded.runtime.settings.artifacts_dir.joinpath("models").iterdir()
                  if p.read_bytes() == data)
    hostile = io.BytesIO()
    with tarfile.open(fileobj=hostile, mode="w") as tar:
        tar.add(tmp_path / "model" / "model.onnx", "model.onnx")
        link = tarfile.TarInfo("model.onnx.data")
        link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
        tar.addfile(link)
    stored.write_bytes(hostile.getvalue())

    job = embedded.wait(embedded.submit(model_id, backend="onnxruntime", input_shapes=SHAPES,
                                        benchmark=FAST_BENCHMARK))

    assert job["status"] == "failed"
    assert job["error"]["code"] == "InvalidModelError", job["error"]
    assert "'model.onnx.data', which is not a file or a folder" in job["error"]["message"]


@pytest.mark.parametrize("precision", ["fp16", "int8"])
def test_a_model_with_its_data_files_converts_to_a_lower_precision(
        embedded: EmbeddedWorker, tmp_path: Path, precision: str) -> None:
    model_id, _ = _uploaded(embedded, tmp_path / "model", seed=7)
    job = embedded.wait(embedded.submit(model_id, backend="onnxruntime", input_shapes=SHAPES,
                                        precision=precision, benchmark=FAST_BENCHMARK,
                                        ort_intra_op_threads=1))

    assert job["status"] == "succeeded", job["error"]
    assert job["validation"]["passed"] is True
    assert "engine.onnx" in {a["name"] for a in job["artifacts"]}


def test_a_tensorrt_job_builds_from_the_models_folder_with_its_data_files(
        embedded: EmbeddedWorker, tmp_path: Path) -> None:
    # FakeTensorRT (tests/support/fake_tensorrt.py) stands in for TensorRT and a GPU.
    model_id, _ = _uploaded(embedded, tmp_path / "model", seed=8)
    job = embedded.wait(embedded.submit(model_id, backend="tensorrt", precision="fp16",
                                        input_shapes=SHAPES, benchmark=FAST_BENCHMARK))

    assert job["status"] == "succeeded", job["error"]
    assert job["validation"]["passed"] is True
    names = {a["name"] for a in job["artifacts"]}
    assert {"fused.onnx", "fused.onnx.data", "model.fp16.onnx", "model.fp16.onnx.data"} <= names
