"""A job that leaves dims dynamic also has its rewrites checked at a larger shape, where a
softmax over more than one key shows a wrong attention rewrite that sequence length 1 hides."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import onnx_ir as ir
import pytest
from onnxscript.rewriter.pattern import RewriteRuleClassBase

from optimizer.errors import AccuracyMismatchError
from optimizer.optimize import OptimizeOptions
from optimizer.passes import DEFAULT_PASSES
from optimizer.passes.base import FusionPass
from optimizer.testing.token_models import masked_token_attention
from tests.support.embedded_worker import job_run
from worker.pipeline.results import JobRun
from worker.pipeline.steps.larger_shape_check import check_rewrites_at_larger_shape
from worker.pipeline.steps.load import load_model


class SoftmaxToOnes(RewriteRuleClassBase):
    """A WRONG rewrite, planted: a softmax over one key is 1, over more it is not."""

    def pattern(self, op: Any, x: ir.Value) -> ir.Value:
        return op.Softmax(x, _allow_other_attributes=True)

    def rewrite(self, op: Any, x: ir.Value) -> ir.Value:
        return op.Add(op.Mul(x, op.Constant(value_float=0.0)), op.Constant(value_float=1.0))


PLANTED = FusionPass(name="planted_softmax_to_ones", summary="test only", stage="other",
                     rules={"onnxruntime": [SoftmaxToOnes.rule()]})


def _run(tmp_path: Path, config: dict[str, Any]) -> JobRun:
    return job_run(tmp_path, masked_token_attention(seed=4), {"backend": "onnxruntime", **config})


def _options(passes: list[str]) -> OptimizeOptions:
    return OptimizeOptions(backend="onnxruntime", passes=passes,
                           catalog=(*DEFAULT_PASSES, PLANTED))


def test_a_wrong_rewrite_sequence_length_one_hides_fails_at_the_larger_shape(
        tmp_path: Path) -> None:
    run = _run(tmp_path, {})
    loaded = load_model(run)
    assert set(loaded.input_shapes.values()) == {(1, 1)}  # where the engine is validated

    check = check_rewrites_at_larger_shape(run, loaded, _options(["planted_softmax_to_ones"]))

    assert check is not None and check.report is not None and not check.report.passed
    assert check.record["input_shapes"] == {name: [2, 16] for name in
                                            ("input_ids", "token_type_ids", "attention_mask")}
    with pytest.raises(AccuracyMismatchError, match=r"at input shapes input_ids=\[2, 16\]"):
        check.raise_if_failed(run.job_id)


def test_the_default_passes_pass_at_the_larger_shape(tmp_path: Path) -> None:
    run = _run(tmp_path, {})

    check = check_rewrites_at_larger_shape(run, load_model(run),
                                           OptimizeOptions(backend="onnxruntime", passes="all"))

    assert check is not None and check.record["passed"] is True
    check.raise_if_failed(run.job_id)


def test_a_job_that_gives_its_shapes_is_not_checked_again(tmp_path: Path) -> None:
    shapes = {name: [2, 8] for name in ("input_ids", "token_type_ids", "attention_mask")}
    run = _run(tmp_path, {"input_shapes": shapes})

    assert check_rewrites_at_larger_shape(run, load_model(run), _options(["fuse_gelu"])) is None
