"""`fuseforge optimize` and `validate` on a model whose weights are in a data file beside it:
the data file is checked before anything reads it, the fused model is written with a data file
of its own, and it validates against the original."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import onnx
import pytest

from fuseforge_cli.main import main
from optimizer.testing.block_stack import block_stack
from optimizer.testing.passes import op_types, run_model

# The layouts exporters write: one data file; one file per tensor, scalars too (onnx.save
# with all_tensors_to_one_file=False, size_threshold=0); a data file in a subfolder.
LAYOUTS = {"one-file": {"location": "model.onnx.data"},
           "file-per-tensor": {"all_tensors_to_one_file": False, "size_threshold": 0},
           "subfolder": {"location": "weights/data.bin"}}


@pytest.fixture(params=list(LAYOUTS))
def external_model(tmp_path: Path, request: pytest.FixtureRequest) -> Path:
    path = tmp_path / "model" / "model.onnx"
    (path.parent / "weights").mkdir(parents=True)
    onnx.save(block_stack(3, hidden=64, seed=8), path, save_as_external_data=True,
              **LAYOUTS[request.param])
    return path


def test_an_external_data_model_is_optimized_into_a_model_and_data_file_that_validate(
        external_model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out" / "opt.onnx"
    out.parent.mkdir()

    assert main(["optimize", str(external_model), "-o", str(out)]) == 0

    assert sorted(os.listdir(out.parent)) == ["opt.onnx", "opt.onnx.data"]
    assert out.stat().st_size < 64 * 64 * 4  # the weights are in the data file
    fused = onnx.load(out)
    assert "LayerNormalization" in op_types(fused) and "ReduceMean" not in op_types(fused)
    feed = {"input": np.random.default_rng(1).standard_normal((1, 8, 64), np.float32)}
    np.testing.assert_allclose(run_model(fused, feed)[0],
                               run_model(onnx.load(external_model), feed)[0],
                               atol=1e-4, rtol=1e-3)
    capsys.readouterr()
    assert main(["validate", str(external_model), str(out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["passed"] is True


def test_a_data_file_outside_the_models_folder_is_refused_by_optimize(
        external_model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = onnx.load(external_model, load_external_data=False)
    for tensor in model.graph.initializer:
        for entry in tensor.external_data:
            if entry.key == "location":
                entry.value = f"../{entry.value}"
    onnx.save(model, external_model)

    code = main(["optimize", str(external_model), "-o", str(tmp_path / "opt.onnx")])

    assert code != 0
    err = capsys.readouterr().err
    assert "InvalidModelError" in err and "'../" in err
    assert not (tmp_path / "opt.onnx").exists()
