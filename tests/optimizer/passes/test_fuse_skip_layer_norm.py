"""fuse_skip_layer_norm: residual Add (+ bias) + LayerNormalization → SkipLayerNormalization."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from optimizer.passes.base import FusionPass
from optimizer.passes.fuse_skip_layer_norm import FUSE_SKIP_LAYER_NORM
from optimizer.testing.norm_models import skip_layer_norm
from optimizer.testing.passes import apply_pass, assert_outputs_close, op_types

SKIP_LN = "com.microsoft.SkipLayerNormalization"


def only(rule_name: str) -> FusionPass:
    """A pass with one rule of FUSE_SKIP_LAYER_NORM, to read that rule's refusals alone."""
    [found] = [r for r in FUSE_SKIP_LAYER_NORM.rules["onnxruntime"] if r.name == rule_name]
    return FusionPass(name="one_rule", summary="", stage="other", rules={"onnxruntime": [found]})


@pytest.mark.parametrize(("dtype", "atol"), [(np.float32, 1e-5), (np.float16, 1e-2)])
@pytest.mark.parametrize(
    ("bias", "rule"),
    [(None, "FuseSkipLayerNorm"), ("first", "FuseSkipLayerNormBias"),
     ("last", "FuseSkipLayerNormBias")],
)
@pytest.mark.parametrize("swap", [False, True])
def test_fuse_skip_layer_norm_matches_original(
    dtype: type, atol: float, bias: str | None, rule: str, swap: bool
) -> None:
    model = skip_layer_norm(dtype=dtype, bias=bias, swap=swap)
    fused, report = apply_pass(model, FUSE_SKIP_LAYER_NORM, expect_count=1)
    assert report.applied(rule) == 1
    assert op_types(fused) == [SKIP_LN]
    [node] = fused.graph.node
    assert len(node.input) == (5 if bias else 4) and len(node.output) == 1
    assert_outputs_close(model, fused, atol=atol, rtol=1e-3)


@pytest.mark.parametrize(("dtype", "atol"), [(np.float32, 1e-5), (np.float16, 1e-2)])
@pytest.mark.parametrize(
    ("bias", "rule"),
    [(None, "FuseSkipLayerNormKeepSum"), ("first", "FuseSkipLayerNormBiasKeepSum"),
     ("last", "FuseSkipLayerNormBiasKeepSum")],
)
@pytest.mark.parametrize("reader", ["next_residual", "graph_output"])
def test_fuse_skip_layer_norm_serves_the_sum_from_its_fourth_output(
    dtype: type, atol: float, bias: str | None, rule: str, reader: str
) -> None:
    model = skip_layer_norm(dtype=dtype, bias=bias,
                            sum_read_by_next_residual=reader == "next_residual",
                            sum_is_output=reader == "graph_output")
    fused, report = apply_pass(model, FUSE_SKIP_LAYER_NORM, expect_count=1)
    assert report.applied(rule) == 1
    node = fused.graph.node[0]
    assert op_types(fused)[0] == SKIP_LN and len(node.output) == 4
    assert_outputs_close(model, fused, atol=atol, rtol=1e-3)


def test_fuse_skip_layer_norm_without_beta_on_rank_2() -> None:
    model = skip_layer_norm(shape=(7, 32), beta=False, bias="last")
    fused, _ = apply_pass(model, FUSE_SKIP_LAYER_NORM, expect_count=1)
    [node] = fused.graph.node
    assert list(node.input) == ["x", "skip", "gamma", "", "bias"]
    assert_outputs_close(model, fused, atol=1e-5, rtol=1e-4)


def test_fuse_skip_layer_norm_uses_the_models_epsilon() -> None:
    model = skip_layer_norm(epsilon=0.5)
    fused, _ = apply_pass(model, FUSE_SKIP_LAYER_NORM, expect_count=1)
    assert_outputs_close(model, fused, atol=1e-5, rtol=1e-4)


def test_fuse_skip_layer_norm_has_no_tensorrt_lowering() -> None:
    model = skip_layer_norm()
    fused, report = apply_pass(model, FUSE_SKIP_LAYER_NORM, backend="tensorrt", expect_count=0)
    assert "fuse_skip_layer_norm" in report.passes_skipped
    assert op_types(fused) == ["Add", "LayerNormalization"]


def test_fuse_skip_layer_norm_is_off_by_default_on_onnxruntime() -> None:
    assert "slower" in FUSE_SKIP_LAYER_NORM.off_by_default["onnxruntime"]


@pytest.mark.parametrize(
    ("variant", "reason"),
    [
        ({"axis": -2}, "normalizes from axis -2"),
        ({"stash_type": 0}, "stash_type 0"),
        ({"gamma_as_input": True}, "'gamma' is also a graph input"),
        ({"skip_shape": (1, 5, 16)}, "differ in shape"),
        ({"shape": (2, 3, 4, 8)}, "rank 4"),
        ({"mean_output_used": True}, "'mean' (LayerNormalization output) is a graph output"),
        ({"infer_shapes": False, "skip_from_relu": True}, "unknown (run shape inference)"),
    ],
    ids=["not-last-axis", "stash-type", "gamma-input", "broadcast-skip", "rank-4",
         "mean-output", "unknown-shape"],
)
def test_fuse_skip_layer_norm_refuses_unsafe_variants(variant: dict, reason: str) -> None:
    model = skip_layer_norm(**variant)
    fused, report = apply_pass(model, FUSE_SKIP_LAYER_NORM, expect_count=0)
    assert SKIP_LN not in op_types(fused)
    [stats] = [s for s in report.rules if s.rule == "FuseSkipLayerNorm"]
    assert any(reason in r.reason for r in stats.refusals), stats


@pytest.mark.parametrize(
    ("variant", "reason"),
    [
        ({"bias": "first", "bias_as_input": True}, "expected one constant 1-D bias"),
        ({"bias": "first", "inner_sum_used_elsewhere": True},
         "'inner' (Add output) is also used by Relu"),
    ],
    ids=["bias-input", "inner-sum-shared"],
)
def test_unsafe_bias_stays_outside_and_the_residual_add_still_fuses(
    variant: dict, reason: str
) -> None:
    model = skip_layer_norm(**variant)
    _, report = apply_pass(model, only("FuseSkipLayerNormBias"), expect_count=0)
    [stats] = report.rules
    assert any(reason in r.reason for r in stats.refusals), stats

    fused, report = apply_pass(model, FUSE_SKIP_LAYER_NORM, expect_count=1)
    assert report.applied("FuseSkipLayerNorm") == 1
    assert op_types(fused)[:2] == ["Add", SKIP_LN]
    assert_outputs_close(model, fused, atol=1e-5, rtol=1e-4)


def test_rule_without_sum_output_refuses_a_sum_read_elsewhere() -> None:
    model = skip_layer_norm(sum_read_by_next_residual=True)
    _, report = apply_pass(model, only("FuseSkipLayerNorm"), expect_count=0)
    [stats] = report.rules
    assert any("'sum' (Add output) is also used by Add" in r.reason for r in stats.refusals), stats


@settings(max_examples=25, deadline=None)
@given(
    hidden=st.integers(1, 64),
    rows=st.integers(1, 6),
    rank_3=st.booleans(),
    bias=st.sampled_from([None, "first", "last"]),
    swap=st.booleans(),
    beta=st.booleans(),
    keep_sum=st.booleans(),
    epsilon=st.floats(1e-6, 1e-1),
    seed=st.integers(0, 2**16),
)
def test_fuse_skip_layer_norm_is_equivalent_on_random_residuals(
    hidden: int, rows: int, rank_3: bool, bias: str | None, swap: bool, beta: bool,
    keep_sum: bool, epsilon: float, seed: int,
) -> None:
    shape = (2, rows, hidden) if rank_3 else (rows, hidden)
    model = skip_layer_norm(shape=shape, bias=bias, swap=swap, beta=beta, epsilon=epsilon,
                            sum_read_by_next_residual=keep_sum, seed=seed)
    fused, _ = apply_pass(model, FUSE_SKIP_LAYER_NORM, expect_count=1)
    assert op_types(fused)[0] == SKIP_LN
    assert_outputs_close(model, fused, atol=1e-4, rtol=1e-3, seed=seed)
