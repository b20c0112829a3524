"""`fuseforge validate`: exit 0 when the candidate matches, 1 when it does not, 2 when it cannot tell."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from fuseforge_cli.main import main
from optimizer.backends.onnxruntime.runner import OnnxRuntimeRunner
from tests.models import IR_VERSION, OPSET, small_cnn


@pytest.fixture
def original(tmp_path: Path) -> Path:
    path = tmp_path / "original.onnx"
    onnx.save(small_cnn(seed=3), path)
    return path


@pytest.fixture
def perturbed(tmp_path: Path) -> Path:
    """small_cnn(seed=3) with noise (std 0.05) on the classifier's weights (std 0.3)."""
    model = small_cnn(seed=3)
    (fc_w,) = [t for t in model.graph.initializer if t.name == "fc.w"]
    weights = numpy_helper.to_array(fc_w)
    noise = np.random.default_rng(8).normal(0, 0.05, weights.shape).astype(weights.dtype)
    fc_w.CopyFrom(numpy_helper.from_array(weights + noise, "fc.w"))
    path = tmp_path / "perturbed.onnx"
    onnx.save(model, path)
    return path


def _embedding(vocab: int) -> onnx.ModelProto:
    """ids int64 [1, 6] -> Gather from a [vocab, 4] table -> "vectors" [1, 6, 4]."""
    table = np.random.default_rng(0).standard_normal((vocab, 4)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Gather", ["table", "ids"], ["vectors"], axis=0)], "embedding",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, 6])],
        [helper.make_tensor_value_info("vectors", TensorProto.FLOAT, [1, 6, 4])],
        [numpy_helper.from_array(table, "table")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = IR_VERSION
    return model


def test_validate_passes_the_model_against_itself(original, capsys):
    assert main(["validate", str(original), str(original)]) == 0

    out = capsys.readouterr().out
    assert "8 samples of random inputs" in out
    assert out.splitlines()[-1].startswith("PASSED (atol=0.0001, rtol=0.001")


def test_validate_fails_a_perturbed_model_and_lists_the_broken_limits(original, perturbed,
                                                                       capsys):
    code = main(["validate", str(original), str(perturbed), "--tolerance", "min_snr_db=60"])

    assert code == 1
    out = capsys.readouterr().out
    assert "limit(s) broken:" in out and out.splitlines()[-1].startswith("FAILED")
    assert "output 'logits': SNR" in out and "below the minimum 60.0 dB" in out


def test_validate_json_is_the_report(original, perturbed, capsys):
    code = main(["validate", str(original), str(perturbed), "--json", "--samples", "3",
                 "--precision", "fp16", "--seed", "4"])

    report = json.loads(capsys.readouterr().out)
    assert code == 1 and report["passed"] is False
    assert report["samples"] == 3
    assert report["tolerances"] == {"atol": 1e-2, "rtol": 1e-2, "min_cosine": 0.999}
    (logits,) = report["outputs"]
    assert logits["name"] == "logits" and logits["passed"] is False
    assert logits["top1_agreement"] is not None and logits["snr_db"] > 0
    elementwise, cosine = report["failures"]
    assert (elementwise["metric"], elementwise["limit"]) == ("elementwise", 1.0)
    assert elementwise["value"] > 1 and elementwise["excess"] == \
        pytest.approx(elementwise["value"] - 1)
    assert (cosine["metric"], cosine["value"], cosine["limit"]) == \
        ("cosine_similarity", logits["cosine_similarity"], 0.999)


def test_validate_uses_the_dataset_and_its_labels(original, tmp_path, capsys):
    rng = np.random.default_rng(1)
    images = rng.standard_normal((6, 1, 3, 32, 32)).astype(np.float32)
    with OnnxRuntimeRunner(original) as runner:
        predicted = np.array([runner.infer({"input": x})["logits"].argmax() for x in images])
    labels = predicted.copy()
    labels[:2] = (labels[:2] + 1) % 10  # the model is right on 4 of 6
    dataset = tmp_path / "val.npz"
    np.savez(dataset, input=images, labels=labels)

    code = main(["validate", str(original), str(original), "--dataset", str(dataset), "--json"])

    assert code == 0
    report = json.loads(capsys.readouterr().out)
    assert report["samples"] == 6
    (logits,) = report["outputs"]
    assert logits["reference_accuracy"] == logits["candidate_accuracy"] == pytest.approx(4 / 6)
    assert logits["accuracy_drop"] == 0.0


def test_validate_samples_takes_the_first_samples_of_the_dataset(original, tmp_path, capsys):
    dataset = tmp_path / "val.npz"
    np.savez(dataset, input=np.zeros((5, 2, 3, 32, 32), np.float32))

    assert main(["validate", str(original), str(original), "--dataset", str(dataset),
                 "--samples", "2"]) == 0
    assert "2 samples of dataset" in capsys.readouterr().out


def test_validate_input_range_keeps_token_ids_inside_the_vocabulary(tmp_path, capsys):
    path = tmp_path / "embedding.onnx"
    onnx.save(_embedding(vocab=5), path)

    # Default integers run to 9, past the 5-row table: ONNX Runtime refuses to gather them.
    assert main(["validate", str(path), str(path)]) == 2
    assert "InferenceError" in capsys.readouterr().err
    assert main(["validate", str(path), str(path), "--input-range", "ids=0,5"]) == 0


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--input-range", "token_ids=0,5"], "InputRangeError: A value range was given for "
                                             "input 'token_ids'"),
        (["--tolerance", "atl=1"], "Unknown tolerance 'atl'"),
        (["--samples", "0"], "--samples must be at least 1"),
        (["--input-shape", "input=2,3"], "InputShapeError"),
        (["--class-output", "probs"], "DatasetError: Output 'probs' was named as class scores"),
    ],
)
def test_validate_reports_bad_arguments_with_exit_2(original, capsys, extra, message):
    assert main(["validate", str(original), str(original), *extra]) == 2
    assert message in capsys.readouterr().err


def test_validate_refuses_a_dataset_that_does_not_fit_with_exit_2(original, tmp_path, capsys):
    dataset = tmp_path / "val.npz"
    np.savez(dataset, input=np.zeros((4, 3, 32, 32), np.float32))

    assert main(["validate", str(original), str(original), "--dataset", str(dataset)]) == 2
    assert "DatasetError: Array 'input' has shape [4, 3, 32, 32]" in capsys.readouterr().err


def test_validate_refuses_input_ranges_with_a_dataset(original, tmp_path, capsys):
    dataset = tmp_path / "val.npz"
    np.savez(dataset, input=np.zeros((1, 1, 3, 32, 32), np.float32))

    assert main(["validate", str(original), str(original), "--dataset", str(dataset),
                 "--input-range", "input=0,1"]) == 2
    assert "no effect with --dataset" in capsys.readouterr().err


def test_validate_refuses_an_unreadable_model_with_exit_2(original, tmp_path, capsys):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x00\x01not a model")

    assert main(["validate", str(original), str(bad)]) == 2
    assert "InvalidModelError" in capsys.readouterr().err


def test_validate_refuses_a_candidate_with_other_inputs_with_exit_2(original, tmp_path, capsys):
    other = tmp_path / "embedding.onnx"
    onnx.save(_embedding(vocab=5), other)

    assert main(["validate", str(original), str(other)]) == 2
    assert "a candidate must take the same inputs" in capsys.readouterr().err


def test_validate_malformed_option_values_stop_argparse_with_exit_2(original):
    with pytest.raises(SystemExit) as caught:
        main(["validate", str(original), str(original), "--input-range", "ids=1"])
    assert caught.value.code == 2
