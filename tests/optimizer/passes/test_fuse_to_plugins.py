"""fuse_to_plugins: fusable subgraphs and com.microsoft ops → fuseforge plugin nodes (TensorRT).

The pass holds fuse_to_plugins.py's rules and then retarget_contrib_ops.py's, so both are tested
here, through the pass.

Equivalence is checked the way a TensorRT job is validated on the CPU: the fused model's plugin
nodes are decomposed back into standard ops (optimizer.plugins.decompose_for_onnxruntime) and
run in ONNX Runtime against the original.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import helper, numpy_helper

from optimizer.fusion_report import FusionReport
from optimizer.passes.base import FusionPass
from optimizer.passes.engine import run_passes
from optimizer.passes.fuse_attention import FUSE_ATTENTION
from optimizer.passes.fuse_gelu import FUSE_GELU
from optimizer.passes.fuse_skip_layer_norm import FUSE_SKIP_LAYER_NORM
from optimizer.passes.fuse_to_plugins import FUSE_TO_PLUGINS
from optimizer.plugins import decompose_for_onnxruntime
from optimizer.plugins.skip_layer_norm import MAX_HIDDEN
from optimizer.testing.attention_models import attention
from optimizer.testing.gelu_models import PRODUCTS, gelu
from optimizer.testing.norm_models import skip_layer_norm
from optimizer.testing.passes import (
    apply_pass,
    assert_outputs_close,
    op_types,
    random_inputs,
    run_model,
    tensorrt_passes,
)
from optimizer.testing.real_models import bert_encoder

SKIP_LN, BIAS_GELU, MHA = ("fuseforge.SkipLayerNorm", "fuseforge.BiasGelu",
                           "fuseforge.MultiHeadAttention")
PROJECTIONS = ["MatMul", "Add"] * 3


def to_plugins(model: onnx.ModelProto, expect_count: int | None = None,
               ) -> tuple[onnx.ModelProto, FusionReport]:
    return apply_pass(model, FUSE_TO_PLUGINS, backend="tensorrt", expect_count=expect_count)


def assert_decomposed_close(original: onnx.ModelProto, fused: onnx.ModelProto, *, atol: float,
                            rtol: float, seed: int = 0) -> None:
    decomposed = decompose_for_onnxruntime(fused)
    onnx.checker.check_model(decomposed, full_check=True)
    assert_outputs_close(original, decomposed, atol=atol, rtol=rtol, seed=seed)


def attributes(node: onnx.NodeProto) -> dict[str, Any]:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def refusals(report: FusionReport, rule: str) -> list[str]:
    [stats] = [s for s in report.rules if s.rule == rule]
    return [r.reason for r in stats.refusals]


def only(rule_name: str) -> FusionPass:
    [rule] = [r for r in FUSE_TO_PLUGINS.rules["tensorrt"] if r.name == rule_name]
    return FusionPass(name="one_rule", summary="", stage="other", rules={"tensorrt": [rule]})


def test_the_pass_runs_on_tensorrt_only() -> None:
    assert FUSE_TO_PLUGINS.supports("tensorrt") and not FUSE_TO_PLUGINS.supports("onnxruntime")
    model = skip_layer_norm()
    fused, report = apply_pass(model, FUSE_TO_PLUGINS, backend="onnxruntime", expect_count=0)
    assert "fuse_to_plugins" in report.passes_skipped
    assert op_types(fused) == ["Add", "LayerNormalization"]


# --- SkipLayerNorm --------------------------------------------------------------------------

@pytest.mark.parametrize(("dtype", "atol"), [(np.float32, 1e-5), (np.float16, 1e-2)])
@pytest.mark.parametrize(("bias", "rule"), [(None, "PluginSkipLayerNorm"),
                                            ("first", "PluginSkipLayerNormBias"),
                                            ("last", "PluginSkipLayerNormBias")])
@pytest.mark.parametrize("swap", [False, True])
def test_skip_layer_norm_becomes_the_plugin(dtype: type, atol: float, bias: str | None,
                                            rule: str, swap: bool) -> None:
    model = skip_layer_norm(dtype=dtype, bias=bias, swap=swap, epsilon=1e-3)
    fused, report = to_plugins(model, expect_count=1)
    assert report.applied(rule) == 1
    assert op_types(fused) == [SKIP_LN]
    [node] = fused.graph.node
    assert len(node.input) == 5 and len(node.output) == 1
    assert attributes(node) == {"epsilon": pytest.approx(1e-3), "plugin_namespace": b"fuseforge",
                                "aot": 1}
    assert_decomposed_close(model, fused, atol=atol, rtol=1e-3)


@pytest.mark.parametrize("reader", ["next_residual", "graph_output"])
def test_skip_layer_norm_serves_the_sum_from_its_second_output(reader: str) -> None:
    model = skip_layer_norm(bias="first", sum_read_by_next_residual=reader == "next_residual",
                            sum_is_output=reader == "graph_output")
    fused, report = to_plugins(model, expect_count=1)
    assert report.applied("PluginSkipLayerNormBiasKeepSum") == 1
    assert op_types(fused)[0] == SKIP_LN and len(fused.graph.node[0].output) == 2
    assert_decomposed_close(model, fused, atol=1e-5, rtol=1e-4)


def test_missing_beta_and_bias_become_one_shared_zero_constant() -> None:
    model = skip_layer_norm(shape=(7, 32), beta=False)
    fused, _ = to_plugins(model, expect_count=1)
    [node] = fused.graph.node
    assert node.input[3] == node.input[4] == "fuseforge_zeros_32_float32"
    [zeros] = [numpy_helper.to_array(t) for t in fused.graph.initializer
               if t.name == node.input[3]]
    assert zeros.shape == (32,) and not zeros.any()
    assert_decomposed_close(model, fused, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize(
    ("variant", "reason"),
    [
        ({"axis": -2}, "normalizes from axis -2"),
        ({"stash_type": 0}, "stash_type 0"),
        ({"gamma_as_input": True}, "'gamma' is also a graph input"),
        ({"skip_shape": (1, 5, 16)}, "differ in shape"),
        ({"mean_output_used": True}, "'mean' (LayerNormalization output) is a graph output"),
        ({"shape": (1, 2, MAX_HIDDEN + 8)}, "above the SkipLayerNorm kernel's"),
    ],
    ids=["not-last-axis", "stash-type", "gamma-input", "broadcast-skip", "mean-output",
         "too-wide"],
)
def test_skip_layer_norm_refuses_unsafe_variants(variant: dict, reason: str) -> None:
    model = skip_layer_norm(**variant)
    fused, report = to_plugins(model, expect_count=0)
    assert SKIP_LN not in op_types(fused)
    assert any(reason in r for r in refusals(report, "PluginSkipLayerNorm")), report


# --- BiasGelu -------------------------------------------------------------------------------

@pytest.mark.parametrize(("dtype", "atol"), [(np.float32, 1e-5), (np.float16, 4e-3)])
@pytest.mark.parametrize(("form", "spelling", "rule", "approximate"), [
    ("erf", "add", "PluginBiasGeluErf", b"none"),
    ("tanh", "add", "PluginBiasGeluTanh", b"tanh"),
    ("erf", "gelu20", "PluginBiasOnnxGelu", b"none"),
    ("tanh", "gelu20", "PluginBiasOnnxGelu", b"tanh"),
])
def test_bias_gelu_becomes_the_plugin(dtype: type, atol: float, form: str, spelling: str,
                                      rule: str, approximate: bytes) -> None:
    model = gelu(form=form, bias=spelling, dtype=dtype, opset=20 if spelling == "gelu20" else 18)
    fused, report = to_plugins(model, expect_count=1)
    assert report.applied(rule) == 1
    assert op_types(fused) == [BIAS_GELU]
    [node] = fused.graph.node
    assert list(node.input) == ["input", "bias"]
    assert attributes(node) == {"approximate": approximate, "plugin_namespace": b"fuseforge",
                                "aot": 1}
    assert_decomposed_close(model, fused, atol=atol, rtol=1e-3)


@settings(max_examples=25, deadline=None)
@given(form=st.sampled_from(["erf", "tanh"]), product=st.sampled_from(PRODUCTS),
       scaling=st.sampled_from(["div", "mul", "mul_swapped"]),
       cube=st.sampled_from(["pow", "mul_left", "mul_right"]), one_first=st.booleans(),
       hidden=st.integers(1, 48), seed=st.integers(0, 2**16))
def test_bias_gelu_is_equivalent_on_random_spellings(
        form: str, product: str, scaling: str, cube: str, one_first: bool, hidden: int,
        seed: int) -> None:
    model = gelu(form=form, product=product, scaling=scaling, cube=cube, one_first=one_first,
                 bias="add", shape=(3, hidden), seed=seed)
    fused, _ = to_plugins(model, expect_count=1)
    assert op_types(fused) == [BIAS_GELU]
    assert_decomposed_close(model, fused, atol=1e-5, rtol=1e-4, seed=seed)


def test_a_gelu_without_bias_is_left_for_fuse_gelu() -> None:
    fused, _ = to_plugins(gelu(), expect_count=0)
    assert BIAS_GELU not in op_types(fused)


@pytest.mark.parametrize(
    ("variant", "reason"),
    [
        ({"half": 0.6}, "the factor 0.5 'half' is 0.6"),
        ({"bias_used_elsewhere": True}, "'x' (Add output) is also used by Relu"),
        ({"scaled_is_output": True}, "'scaled' (Div output) is a graph output"),
    ],
    ids=["half", "bias-sum-shared", "scaled-output"],
)
def test_bias_gelu_refuses_unsafe_variants(variant: dict, reason: str) -> None:
    model = gelu(bias="add", **variant)
    fused, report = to_plugins(model, expect_count=0)
    assert BIAS_GELU not in op_types(fused)
    assert any(reason in r for r in refusals(report, "PluginBiasGeluErf")), report


def test_bias_gelu_refuses_a_bias_that_is_a_graph_input() -> None:
    model = gelu(bias="gelu20", opset=20)
    model.graph.input.append(helper.make_tensor_value_info("bias", onnx.TensorProto.FLOAT, [16]))
    _, report = to_plugins(model, expect_count=0)
    assert any("nor 'bias' is a constant float or float16 1-D bias" in r
               for r in refusals(report, "PluginBiasOnnxGelu")), report


# --- MultiHeadAttention ---------------------------------------------------------------------

@pytest.mark.parametrize(("dtype", "atol", "rtol"), [(np.float32, 1e-5, 1e-4),
                                                     (np.float16, 1e-2, 1e-2)])
@pytest.mark.parametrize("mask", [None, "input", "const"])
@pytest.mark.parametrize("scale_mode", ["div", "split"])
def test_attention_becomes_the_plugin(dtype: type, atol: float, rtol: float, mask: str | None,
                                      scale_mode: str) -> None:
    model = attention(dtype=dtype, mask=mask, scale_mode=scale_mode)
    fused, report = to_plugins(model, expect_count=1)
    assert report.applied("PluginMultiHeadAttention") == 1
    assert op_types(fused) == [*PROJECTIONS, MHA, "MatMul", "Add"]
    [node] = [n for n in fused.graph.node if n.op_type == "MultiHeadAttention"]
    assert attributes(node)["num_heads"] == 4
    assert attributes(node)["scale"] == pytest.approx(1 / np.sqrt(8), rel=1e-3)
    assert len(node.input) == 4
    assert_decomposed_close(model, fused, atol=atol, rtol=rtol)


def test_attention_without_mask_gets_a_zero_bias_and_a_mask_keeps_its_values() -> None:
    fused, _ = to_plugins(attention(), expect_count=1)
    [node] = [n for n in fused.graph.node if n.op_type == "MultiHeadAttention"]
    assert node.input[3] == "fuseforge_zeros_1x1x1x1_float32"
    model = attention(mask="input", mask_shape=(8, 8))  # [S, T]: reshaped to [1, 1, S, T]
    fused, _ = to_plugins(model, expect_count=1)
    assert "Reshape" in op_types(fused)
    assert_decomposed_close(model, fused, atol=1e-5, rtol=1e-4)


def test_cross_attention_with_wider_values_becomes_the_plugin() -> None:
    model = attention(kv_seq=5, v_head_dim=12, mask="input", mask_shape=(2, 1, 1, 5))
    fused, _ = to_plugins(model, expect_count=1)
    assert_decomposed_close(model, fused, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize(
    ("variant", "reason"),
    [
        ({"mask": "where"}, "masked by Where"),
        ({"softmax_axis": 2}, "is over axis 2"),
        ({"probs_shared": True}, "'probs' (Softmax output) is also used by ReduceMax 'n_probs_max'"),
        ({"heads": 1, "head_dim": 320}, "above the MultiHeadAttention kernel's 256"),
    ],
    ids=["where-mask", "softmax-axis", "probs-shared", "head-too-large"],
)
def test_attention_refuses_unsafe_variants(variant: dict, reason: str) -> None:
    model = attention(**variant)
    fused, report = to_plugins(model, expect_count=0)
    assert MHA not in op_types(fused)
    assert any(reason in r for r in refusals(report, "PluginMultiHeadAttention")), report


# --- com.microsoft ops (an ONNX Runtime-optimized upload) ------------------------------------

def contrib(model: onnx.ModelProto, fusion: FusionPass) -> onnx.ModelProto:
    """`model` as ONNX Runtime's fusions leave it (com.microsoft ops), shape-inferred as the
    job's load stage does with an upload."""
    fused, _ = apply_pass(model, fusion, backend="onnxruntime")
    assert any(op.startswith("com.microsoft.") for op in op_types(fused))
    return onnx.shape_inference.infer_shapes(fused)


@pytest.mark.parametrize(("model", "fusion", "rule", "plugin"), [
    (lambda: skip_layer_norm(bias="first"), FUSE_SKIP_LAYER_NORM,
     "RetargetContribSkipLayerNorm1", SKIP_LN),
    (lambda: skip_layer_norm(beta=False, sum_read_by_next_residual=True), FUSE_SKIP_LAYER_NORM,
     "RetargetContribSkipLayerNorm4", SKIP_LN),
    (lambda: gelu(bias="add"), FUSE_GELU, "RetargetContribBiasGelu", BIAS_GELU),
    (lambda: gelu(bias="add", form="tanh"), FUSE_GELU, "RetargetContribFastGelu", BIAS_GELU),
    (lambda: gelu(), FUSE_GELU, "RetargetContribGelu", BIAS_GELU),
    (lambda: gelu(form="tanh"), FUSE_GELU, "RetargetContribFastGelu", BIAS_GELU),
    (lambda: attention(mask="input"), FUSE_ATTENTION, "RetargetContribMultiHeadAttention",
     MHA),
    (lambda: attention(), FUSE_ATTENTION, "RetargetContribMultiHeadAttention", MHA),
], ids=["skip-ln", "skip-ln-sum", "bias-gelu", "fast-gelu-bias", "gelu", "fast-gelu", "mha-mask",
        "mha"])
def test_contrib_ops_tensorrt_cannot_parse_become_plugins(
        model: Any, fusion: FusionPass, rule: str, plugin: str) -> None:
    original = contrib(model(), fusion)
    fused, report = to_plugins(original, expect_count=1)
    assert report.applied(rule) == 1
    assert plugin in op_types(fused)
    assert not any(op.startswith("com.microsoft.") for op in op_types(fused))
    feeds = random_inputs(original)
    decomposed = decompose_for_onnxruntime(fused)
    for want, got in zip(run_model(original, feeds), run_model(decomposed, feeds), strict=True):
        np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-4)


def contrib_mha(**changes: Any) -> onnx.ModelProto:
    model = contrib(attention(), FUSE_ATTENTION)
    [node] = [n for n in model.graph.node if n.op_type == "MultiHeadAttention"]
    for name, value in changes.items():
        if name == "inputs":
            node.input.extend(value)
        else:
            node.attribute.append(helper.make_attribute(name, value))
    return model


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"unidirectional": 1}, "is unidirectional (causal)"),
        ({"inputs": ["", "x"]}, "has a key_padding_mask input"),
        ({"qkv_hidden_sizes": [32, 32, 32]}, "unknown attribute 'qkv_hidden_sizes'"),
    ],
    ids=["causal", "key-padding-mask", "unknown-attribute"],
)
def test_contrib_attention_the_plugin_cannot_take_stays(changes: dict, reason: str) -> None:
    model = contrib_mha(**changes)
    fused, report = apply_pass(model, only("RetargetContribMultiHeadAttention"),
                               backend="tensorrt", expect_count=0)
    assert "com.microsoft.MultiHeadAttention" in op_types(fused)
    assert any(reason in r for r in refusals(report, "RetargetContribMultiHeadAttention")), report


def test_contrib_attention_default_scale_is_one_over_root_head_size() -> None:
    model = contrib(attention(), FUSE_ATTENTION)
    [node] = [n for n in model.graph.node if n.op_type == "MultiHeadAttention"]
    kept = [a for a in node.attribute if a.name != "scale"]
    del node.attribute[:]
    node.attribute.extend([*kept, helper.make_attribute("scale", 0.0)])
    fused, _ = to_plugins(model, expect_count=1)
    [plugin] = [n for n in fused.graph.node if n.op_type == "MultiHeadAttention"]
    assert attributes(plugin)["scale"] == pytest.approx(1 / np.sqrt(8))


# --- The whole pipeline ---------------------------------------------------------------------


@pytest.mark.parametrize("form", ["dynamo", "torchscript", "dynamo_opset20"])
def test_bert_encoder_fuses_into_plugins_and_stays_equivalent(form: str) -> None:
    layers = 2
    model = bert_encoder(layers=layers, hidden=64, heads=2, seq=16, form=form)
    fused_ir = ir.from_proto(model)
    report = run_passes(fused_ir, tensorrt_passes(), backend="tensorrt")
    fused = ir.to_proto(fused_ir)
    onnx.checker.check_model(fused, full_check=True)
    ops = op_types(fused)
    assert ops.count(SKIP_LN) == 2 * layers + 1, report
    assert ops.count(BIAS_GELU) == layers and ops.count(MHA) == layers
    assert not {"LayerNormalization", "Softmax", "Erf", "Gelu"} & set(ops)
    feeds = random_inputs(model)
    feeds["input_ids"] = np.random.default_rng(0).integers(0, 1000, (1, 16))
    [want] = run_model(model, feeds)
    [got] = run_model(decompose_for_onnxruntime(fused), feeds)
    np.testing.assert_allclose(got, want, atol=1e-4, rtol=1e-4)

