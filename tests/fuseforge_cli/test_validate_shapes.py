"""`fuseforge validate` of a model with dynamic dims checks it at the default shape and at a
larger one (a softmax over one key hides a broken mask), names the shapes in the verdict, and
draws token ids, token types and masks in the ranges the graph allows."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from fuseforge_cli.main import main
from optimizer.testing.models import IR_VERSION, OPSET, small_cnn
from optimizer.testing.token_models import masked_token_attention

SEQUENCE_1 = ["--input-shape", "input_ids=1,1", "--input-shape", "token_type_ids=1,1",
              "--input-shape", "attention_mask=1,1"]


def _save(tmp_path: Path, name: str, model: onnx.ModelProto) -> Path:
    path = tmp_path / f"{name}.onnx"
    onnx.save(model, path)
    return path


@pytest.mark.parametrize("flaw", ["mask_ignored", "softmax_over_queries"])
def test_a_broken_attention_passes_at_sequence_1_and_is_caught_by_default(
        flaw: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    original = _save(tmp_path, "bert", masked_token_attention(seed=1))
    broken = _save(tmp_path, flaw, masked_token_attention(seed=1, flaw=flaw))

    # What validating at dynamic dims = 1 alone saw: one key, softmax 1, the flaw invisible.
    assert main(["validate", str(original), str(broken), *SEQUENCE_1]) == 0
    assert capsys.readouterr().out.splitlines()[-1].startswith(
        "PASSED at input_ids=[1, 1], token_type_ids=[1, 1], attention_mask=[1, 1] (")

    assert main(["validate", str(original), str(broken)]) == 2
    out = capsys.readouterr().out
    assert "Checked at 2 input shapes (dynamic dims, none given):" in out
    assert ("  input_ids=[1, 1], token_type_ids=[1, 1], attention_mask=[1, 1] "
            "(8 samples, passed)") in out
    assert ("  input_ids=[2, 16], token_type_ids=[2, 16], attention_mask=[2, 16] "
            "(8 samples, FAILED)") in out
    assert out.splitlines()[-1].startswith("FAILED at input_ids=[1, 1], token_type_ids=[1, 1], "
                                           "attention_mask=[1, 1]; input_ids=[2, 16], ")


def test_a_bert_style_model_validates_against_itself_with_inferred_ranges(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = _save(tmp_path, "bert", masked_token_attention(seed=2, vocab=50))

    assert main(["validate", str(model), str(model), "--json"]) == 0

    report = json.loads(capsys.readouterr().out)
    assert report["input_ranges"] == {
        "input_ids": {"low": 0, "high": 50, "source": "inferred",
                      "reason": "from Gather on 'embeddings.word_embeddings.weight' (50 rows)"},
        "token_type_ids": {"low": 0, "high": 2, "source": "inferred",
                           "reason": "from Gather on 'embeddings.token_type_embeddings.weight' "
                                     "(2 rows)"},
        "attention_mask": {"low": 0, "high": 2, "source": "inferred",
                           "reason": "as a mask (cast to float, then Sub)"},
    }
    assert [check["passed"] for check in report["shapes"]] == [True, True]


def test_a_given_range_overrides_the_inferred_one_and_is_reported(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = _save(tmp_path, "bert", masked_token_attention(seed=2, vocab=50))

    assert main(["validate", str(model), str(model), "--input-range", "input_ids=3,7"]) == 0

    out = capsys.readouterr().out
    assert "  input_ids: [3, 7) as given" in out
    assert "  token_type_ids: [0, 2) from Gather on" in out


def test_a_larger_shape_the_original_cannot_run_at_is_left_out_and_said(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # x ["batch", 4] -> Reshape to [4]: runs at batch 1 only.
    graph = helper.make_graph(
        [helper.make_node("Reshape", ["x", "flat"], ["y"])], "batch_of_one",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
        [numpy_helper.from_array(np.array([4], np.int64), "flat")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = IR_VERSION
    path = _save(tmp_path, "batch_of_one", model)

    assert main(["validate", str(path), str(path)]) == 0

    out = capsys.readouterr().out
    assert "Not checked at x=[2, 4]: the original does not run at it (" in out
    assert out.splitlines()[-1].startswith("PASSED at x=[1, 4] (")


def test_a_static_candidate_is_checked_at_its_own_shapes(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    original = _save(tmp_path, "cnn", small_cnn(seed=5))
    fused = tmp_path / "fused.onnx"
    assert main(["optimize", str(original), "-o", str(fused),
                 "--input-shape", "input=2,3,32,32"]) == 0
    capsys.readouterr()

    assert main(["validate", str(original), str(fused)]) == 0

    assert capsys.readouterr().out.splitlines()[-1].startswith("PASSED at input=[2, 3, 32, 32] (")
