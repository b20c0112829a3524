"""`fuseforge validate`: exit 0 when the candidate matches, 2 when it does not, 1 when the models
cannot be checked, 3 for bad usage (fuseforge_cli/failures.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnxscript.rewriter.pattern import RewriteRuleClassBase

from fuseforge_cli.main import main
from optimizer.backends.onnxruntime.runner import OnnxRuntimeRunner
from optimizer.passes import DEFAULT_PASSES
from optimizer.passes.base import FusionPass
from optimizer.testing.models import IR_VERSION, OPSET, small_cnn


@pytest.fixture
def original(tmp_path: Path) -> Path:
    path = tmp_path / "original.onnx"
    onnx.save(small_cnn(seed=3), path)
    return path


@pytest.fixture
def perturbed(tmp_path: Path) -> Path:
    """small_cnn(seed=3) with noise (std 0.05) on the classifier's weights (std 0.3)."""
    return _perturbed(tmp_path, "fc.w", seed=8)


@pytest.fixture
def conv2_perturbed(tmp_path: Path) -> Path:
    """small_cnn(seed=3) with noise (std 0.05) on the second convolution's weights (std 0.2),
    and only there."""
    return _perturbed(tmp_path, "conv2.w", seed=11)


def _perturbed(tmp_path: Path, weight: str, seed: int) -> Path:
    model = small_cnn(seed=3)
    (tensor,) = [t for t in model.graph.initializer if t.name == weight]
    values = numpy_helper.to_array(tensor)
    noise = np.random.default_rng(seed).normal(0, 0.05, values.shape).astype(values.dtype)
    tensor.CopyFrom(numpy_helper.from_array(values + noise, weight))
    path = tmp_path / f"{weight}_perturbed.onnx"
    onnx.save(model, path)
    return path


class AveragePoolToMaxPool(RewriteRuleClassBase):
    """A WRONG rewrite, planted to be found: the maximum of a channel is not its mean."""

    def pattern(self, op: Any, x: ir.Value) -> ir.Value:
        return op.GlobalAveragePool(x)

    def rewrite(self, op: Any, x: ir.Value) -> ir.Value:
        return op.GlobalMaxPool(x)


PLANTED = FusionPass(name="planted_wrong_pool", summary="test only", stage="other",
                     rules={"onnxruntime": [AveragePoolToMaxPool.rule()]})


# The wrong rule is one of FuseForge's passes for these commands, as if it had shipped.
PLANTED_CATALOG = (*DEFAULT_PASSES, PLANTED)


@pytest.fixture
def planted_candidate(original: Path, tmp_path: Path) -> Path:
    """`fuseforge optimize` of the original at batch 2, the wrong rule among the passes."""
    path = tmp_path / "fused.onnx"
    assert main(["optimize", str(original), "-o", str(path), "--input-shape",
                 "input=2,3,32,32"], catalog=PLANTED_CATALOG) == 0
    return path


@pytest.fixture
def planted_dynamic_candidate(original: Path, tmp_path: Path) -> Path:
    """The same without --input-shape: the batch stays dynamic, and FuseConvAddRelu, which
    needs static shapes, does not fire."""
    path = tmp_path / "fused_dynamic.onnx"
    assert main(["optimize", str(original), "-o", str(path)], catalog=PLANTED_CATALOG) == 0
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
    # A dynamic batch: 8 samples at batch 1, 8 at batch 2.
    assert "16 samples of random inputs" in out
    assert "  input=[2, 3, 32, 32] (8 samples, passed)" in out
    assert out.splitlines()[-1].startswith(
        "PASSED at input=[1, 3, 32, 32]; input=[2, 3, 32, 32] (atol=0.0001, rtol=0.001")


def test_validate_fails_a_perturbed_model_and_lists_the_broken_limits(original, perturbed,
                                                                       capsys):
    code = main(["validate", str(original), str(perturbed), "--tolerance", "min_snr_db=60"])

    assert code == 2
    out = capsys.readouterr().out
    assert "limit(s) broken:" in out and out.splitlines()[-1].startswith("FAILED")
    assert "output 'logits': SNR" in out and "below the minimum 60.0 dB" in out


def test_validate_names_the_layer_whose_weight_was_perturbed(original, conv2_perturbed, capsys):
    code = main(["validate", str(original), str(conv2_perturbed)])

    assert code == 2
    out = capsys.readouterr().out
    (where,) = [line for line in out.splitlines() if line.startswith("Localisation")]
    assert "first 2 samples" in where
    assert "The first divergence is at node 'conv2' (Conv)" in where
    assert "its inputs 'r1' are within tolerance" in where
    assert "Produced by changed weights conv2.w." in where
    assert out.splitlines()[-1].startswith("FAILED")


def test_validate_bisect_names_the_planted_wrong_rule(original, planted_candidate, capsys):
    code = main(["validate", str(original), str(planted_candidate), "--input-shape",
                 "input=2,3,32,32", "--bisect"], catalog=PLANTED_CATALOG)

    assert code == 2
    out = capsys.readouterr().out
    (bisection,) = [line for line in out.splitlines() if line.startswith("Bisection")]
    assert "--passes all --backend onnxruntime, input shapes input=2,3,32,32" in bisection
    assert ("rule AveragePoolToMaxPool (pass planted_wrong_pool) breaks equivalence. With it "
            "excluded the re-optimized model passes.") in bisection
    assert "is not what these passes produce" not in bisection
    (where,) = [line for line in out.splitlines() if line.startswith("Localisation")]
    assert "tensor 'pooled'" in where and "AveragePoolToMaxPool" in where


def test_validate_bisect_json_holds_the_localization_and_the_bisection(
        original, planted_dynamic_candidate, capsys):
    capsys.readouterr()
    code = main(["validate", str(original), str(planted_dynamic_candidate), "--input-shape",
                 "input=2,3,32,32", "--bisect", "--json", "--samples", "3"],
                catalog=PLANTED_CATALOG)

    assert code == 2
    report = json.loads(capsys.readouterr().out)
    assert report["passed"] is False and report["samples"] == 3
    where = report["localization"]
    assert where["tensor"]["name"] == "pooled" and where["samples"] == 2
    assert where["rules"] == ["AveragePoolToMaxPool"]
    assert where["passes"] == ["planted_wrong_pool"]
    bisection = report["bisection"]
    assert bisection["ran"] is True
    assert (bisection["passes"], bisection["backend"]) == ("all", "onnxruntime")
    # Re-optimized at the candidate's dynamic batch, so the same rules fire as made it.
    assert bisection["input_shapes"] == {"input": ["N", 3, 32, 32]}
    assert "FuseConvAddRelu" not in bisection["steps"][0]["enabled_rules"]
    assert bisection["culprits"] == [["AveragePoolToMaxPool"]]
    assert bisection["culprit_passes"] == {"AveragePoolToMaxPool": "planted_wrong_pool"}
    assert bisection["passes_with_culprits_excluded"] is True
    assert bisection["rules_applied"] >= 3
    first = bisection["steps"][0]  # every rule that fired: the re-optimized model fails
    assert first["passed"] is False and "AveragePoolToMaxPool" in first["enabled_rules"]
    assert bisection["candidate_matches_passes"] is True
    assert "AveragePoolToMaxPool" in bisection["message"]
    assert "is not what these passes produce" not in bisection["message"]


def test_validate_bisect_says_when_the_candidate_is_not_what_the_passes_produce(
        original, conv2_perturbed, capsys):
    code = main(["validate", str(original), str(conv2_perturbed), "--bisect"])

    assert code == 2
    out = capsys.readouterr().out
    (bisection,) = [line for line in out.splitlines() if line.startswith("Bisection")]
    assert "ORIGINAL optimized again by FuseForge's passes" in bisection
    assert "passes this check, so no rewrite rule of these passes is to blame" in bisection
    assert f"{str(conv2_perturbed)!r} is not what they produce (op counts, candidate vs " \
        "ORIGINAL optimized again: " in bisection


def test_validate_bisect_warns_when_the_rules_named_did_not_make_the_candidate(
        original, conv2_perturbed, capsys):
    code = main(["validate", str(original), str(conv2_perturbed), "--bisect", "--json"],
                catalog=PLANTED_CATALOG)

    assert code == 2
    report = json.loads(capsys.readouterr().out)
    assert report["localization"]["changed_weights"] == ["conv2.w"]
    bisection = report["bisection"]
    assert bisection["culprits"] == [["AveragePoolToMaxPool"]]
    assert bisection["candidate_matches_passes"] is False
    assert f"But {str(conv2_perturbed)!r} is not what these passes produce" in \
        bisection["message"]
    assert "BatchNormalization 2 vs 0" in bisection["message"]


def test_validate_bisect_of_a_passing_candidate_has_nothing_to_bisect(original, tmp_path,
                                                                     capsys):
    fused = tmp_path / "fused.onnx"
    assert main(["optimize", str(original), "-o", str(fused)]) == 0
    capsys.readouterr()

    assert main(["validate", str(original), str(fused), "--bisect"]) == 0
    out = capsys.readouterr().out
    assert "Bisection: validation passed, so there is nothing to bisect." in out
    assert "Localisation" not in out and out.splitlines()[-1].startswith("PASSED")

    assert main(["validate", str(original), str(fused), "--bisect", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["localization"] is None
    assert report["bisection"]["ran"] is False and report["bisection"]["culprits"] == []
    assert "nothing to bisect" in report["bisection"]["message"]


def test_validate_json_is_the_report(original, perturbed, capsys):
    code = main(["validate", str(original), str(perturbed), "--json", "--samples", "3",
                 "--precision", "fp16", "--seed", "4"])

    report = json.loads(capsys.readouterr().out)
    assert code == 2 and report["passed"] is False and report["exit_code"] == 2
    assert report["samples"] == 6  # 3 at each of batch 1 and batch 2
    assert [check["input_shapes"] for check in report["shapes"]] == [
        {"input": [1, 3, 32, 32]}, {"input": [2, 3, 32, 32]}]
    assert report["tolerances"] == {"atol": 1e-2, "rtol": 1e-2, "min_cosine": 0.999}
    (logits,) = report["outputs"]
    assert logits["name"] == "logits" and logits["passed"] is False
    assert logits["top1_agreement"] is not None and logits["snr_db"] > 0
    assert report["localization"]["node"] == "fc"
    assert report["localization"]["changed_weights"] == ["fc.w"]
    assert "bisection" not in report
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


def test_validate_draws_token_ids_inside_the_vocabulary_and_says_so(tmp_path, capsys):
    path = tmp_path / "embedding.onnx"
    onnx.save(_embedding(vocab=5), path)

    # Integers drawn past the 5-row table: ONNX Runtime refuses to gather them.
    assert main(["validate", str(path), str(path), "--input-range", "ids=0,9"]) == 1
    assert "InferenceError" in capsys.readouterr().err
    # By default the range comes from the table the ids index.
    assert main(["validate", str(path), str(path)]) == 0
    assert "ids: [0, 5) from Gather on 'table' (5 rows)" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--input-range", "token_ids=0,5"], "InputRangeError: A value range was given for "
                                             "input 'token_ids'"),
        (["--tolerance", "atl=1"], "Unknown tolerance 'atl'"),
        (["--samples", "0"], "--samples must be at least 1"),
        (["--input-shape", "input=2,3"], "InputShapeError"),
        (["--class-output", "probs"], "DatasetError: Output 'probs' was named as class scores"),
        (["--passes", "none"], "add --bisect or drop them"),
        (["--backend", "tensorrt"], "add --bisect or drop them"),
        (["--bisect", "--passes", "fuse_nothing"], "PassError: unknown pass(es) 'fuse_nothing'"),
    ],
)
def test_validate_reports_bad_arguments_with_exit_3(original, capsys, extra, message):
    assert main(["validate", str(original), str(original), *extra]) == 3
    assert message in capsys.readouterr().err


def test_validate_refuses_a_dataset_that_does_not_fit_with_exit_3(original, tmp_path, capsys):
    dataset = tmp_path / "val.npz"
    np.savez(dataset, input=np.zeros((4, 3, 32, 32), np.float32))

    assert main(["validate", str(original), str(original), "--dataset", str(dataset)]) == 3
    assert "DatasetError: Array 'input' has shape [4, 3, 32, 32]" in capsys.readouterr().err


def test_validate_refuses_input_ranges_with_a_dataset(original, tmp_path, capsys):
    dataset = tmp_path / "val.npz"
    np.savez(dataset, input=np.zeros((1, 1, 3, 32, 32), np.float32))

    assert main(["validate", str(original), str(original), "--dataset", str(dataset),
                 "--input-range", "input=0,1"]) == 3
    assert "no effect with --dataset" in capsys.readouterr().err


def test_validate_refuses_a_file_that_is_not_a_model_with_exit_1(original, tmp_path, capsys):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x00\x01not a model")

    assert main(["validate", str(original), str(bad)]) == 1
    assert "InvalidModelError" in capsys.readouterr().err


def test_validate_refuses_a_candidate_with_other_inputs_with_exit_3(original, tmp_path, capsys):
    other = tmp_path / "embedding.onnx"
    onnx.save(_embedding(vocab=5), other)

    assert main(["validate", str(original), str(other)]) == 3
    assert "a candidate must take the same inputs" in capsys.readouterr().err


def test_validate_malformed_option_values_are_bad_usage_with_exit_3(original, capsys):
    assert main(["validate", str(original), str(original), "--input-range", "ids=1"]) == 3
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "expected NAME=LOW,HIGH" in err
