"""MultiHeadAttention plugin: reference vs the replaced subgraph, the kernel's blockwise numpy
transcription, decomposition, schema, kernel contract."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import helper, numpy_helper

from optimizer.plugins import PLUGINS
from optimizer.plugins.multi_head_attention.kernel_numpy import blockwise_attention
from optimizer.plugins.multi_head_attention.trt_registration import (
    bias_strides,
    kernel_constexprs,
    kernel_signature,
    tiles,
)
from optimizer.testing.passes import run_model
from tests.optimizer.plugins.support import (
    ONNX_TYPES,
    kernel_parameters,
    plugin_model,
    run_decomposed,
)

PLUGIN = PLUGINS["multi_head_attention"]
# float16: scores reach |10| and the unfused graph rounds them (and the weights) to float16.
TOLERANCES = [(np.float32, 1e-5), (np.float16, 1e-2)]


def arrays(*, batch: int = 2, seq: int = 8, kv_seq: int | None = None, heads: int = 4,
           head: int = 8, head_v: int | None = None, bias_shape: tuple[int, ...] = (1, 1, 1, 1),
           dtype: type = np.float32, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    kv_seq = seq if kv_seq is None else kv_seq
    head_v = head if head_v is None else head_v
    return {
        "query": rng.standard_normal((batch, seq, heads * head)).astype(dtype),
        "key": rng.standard_normal((batch, kv_seq, heads * head)).astype(dtype),
        "value": rng.standard_normal((batch, kv_seq, heads * head_v)).astype(dtype),
        "attention_bias": rng.standard_normal(bias_shape).astype(dtype),
    }


def standard_subgraph(values: dict[str, np.ndarray], heads: int) -> onnx.ModelProto:
    """The written-out attention the op replaces, with explicit head-split shapes and a Div by
    √H (as exporters write it), query/key/value/mask as graph inputs."""
    batch, seq, hidden = values["query"].shape
    kv_seq, hidden_v = values["key"].shape[1], values["value"].shape[2]
    head = hidden // heads
    elem = ONNX_TYPES[values["query"].dtype]

    def shape(name: str, dims: list[int]) -> onnx.TensorProto:
        return numpy_helper.from_array(np.array(dims, np.int64), name)

    nodes = [
        helper.make_node("Reshape", ["query", "q_shape"], ["q4"]),
        helper.make_node("Transpose", ["q4"], ["q"], perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", ["key", "k_shape"], ["k4"]),
        helper.make_node("Transpose", ["k4"], ["kt"], perm=[0, 2, 3, 1]),
        helper.make_node("Reshape", ["value", "v_shape"], ["v4"]),
        helper.make_node("Transpose", ["v4"], ["v"], perm=[0, 2, 1, 3]),
        helper.make_node("MatMul", ["q", "kt"], ["scores"]),
        helper.make_node("Div", ["scores", "root"], ["scaled"]),
        helper.make_node("Add", ["scaled", "attention_bias"], ["masked"]),
        helper.make_node("Softmax", ["masked"], ["probs"], axis=-1),
        helper.make_node("MatMul", ["probs", "v"], ["context"]),
        helper.make_node("Transpose", ["context"], ["merged"], perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", ["merged", "out_shape"], ["output"]),
    ]
    inits = [shape("q_shape", [batch, seq, heads, head]),
             shape("k_shape", [batch, kv_seq, heads, head]),
             shape("v_shape", [batch, kv_seq, heads, hidden_v // heads]),
             shape("out_shape", [batch, seq, hidden_v]),
             numpy_helper.from_array(np.array(math.sqrt(head), values["query"].dtype), "root")]
    graph = helper.make_graph(
        nodes, "attention",
        [helper.make_tensor_value_info(name, elem, list(array.shape))
         for name, array in values.items()],
        [helper.make_tensor_value_info("output", elem, [batch, seq, hidden_v])],
        initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    return model


BIAS_SHAPES = [(1, 1, 1, 1), (2, 1, 1, 11), (1, 3, 7, 11), (2, 3, 7, 11)]


@pytest.mark.parametrize(("dtype", "atol"), TOLERANCES)
@pytest.mark.parametrize("bias_shape", BIAS_SHAPES)
def test_reference_matches_onnxruntime_on_the_replaced_subgraph(
        dtype: type, atol: float, bias_shape: tuple[int, ...]) -> None:
    for seed in range(3):
        values = arrays(batch=2, seq=7, kv_seq=11, heads=3, head=8, head_v=12,
                        bias_shape=bias_shape, dtype=dtype, seed=seed)
        [expected] = run_model(standard_subgraph(values, heads=3), values)
        [actual] = PLUGIN.reference(*values.values(), num_heads=3, scale=1 / math.sqrt(8))
        assert actual.dtype == expected.dtype and actual.shape == (2, 7, 36)
        np.testing.assert_allclose(actual.astype(np.float32), expected.astype(np.float32),
                                   atol=atol, rtol=1e-3)


def test_reference_matches_a_causal_mask() -> None:
    values = arrays(seq=6, bias_shape=(1, 1, 6, 6))
    values["attention_bias"] = np.triu(np.full((6, 6), -np.inf, np.float32), 1)[None, None]
    [expected] = run_model(standard_subgraph(values, heads=4), values)
    [actual] = PLUGIN.reference(*values.values(), num_heads=4, scale=1 / math.sqrt(8))
    np.testing.assert_allclose(actual, expected, atol=1e-5, rtol=1e-4)


def test_kernel_blocks_handle_a_key_block_masked_entirely() -> None:
    """Left padding: every key of the first 16-key block is masked with -inf."""
    values = arrays(batch=2, seq=8, kv_seq=40, heads=2, head=8, bias_shape=(2, 1, 1, 40))
    bias = np.zeros((2, 1, 1, 40), np.float32)
    bias[:, :, :, :20] = -np.inf
    values["attention_bias"] = bias
    expected = PLUGIN.reference(*values.values(), num_heads=2, scale=0.3)[0]
    actual = blockwise_attention(*values.values(), num_heads=2, scale=0.3, block_m=16,
                                 block_n=16)
    assert np.isfinite(actual).all()
    np.testing.assert_allclose(actual, expected, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize(("dtype", "atol"), [(np.float32, 1e-5), (np.float16, 2e-3)])
@pytest.mark.parametrize("bias_shape", [(1, 1, 1, 1), (3, 1, 1, 53), (3, 2, 37, 53)])
def test_kernel_blocks_compute_the_reference(dtype: type, atol: float,
                                             bias_shape: tuple[int, ...]) -> None:
    """Ragged last tiles in both sequences, head sizes that are not powers of two."""
    values = arrays(batch=3, seq=37, kv_seq=53, heads=2, head=24, head_v=40,
                    bias_shape=bias_shape, dtype=dtype)
    expected = PLUGIN.reference(*values.values(), num_heads=2, scale=0.2)[0]
    actual = blockwise_attention(*values.values(), num_heads=2, scale=0.2, block_m=16,
                                 block_n=16)
    assert actual.dtype == expected.dtype
    np.testing.assert_allclose(actual.astype(np.float32), expected.astype(np.float32),
                               atol=atol, rtol=1e-3)


@settings(max_examples=25, deadline=None)
@given(batch=st.integers(1, 2), seq=st.integers(1, 40), kv_seq=st.integers(1, 40),
       heads=st.integers(1, 3), head=st.integers(1, 20), block_n=st.sampled_from([16, 32, 64]),
       seed=st.integers(0, 1000))
def test_kernel_blocks_compute_the_reference_on_random_shapes(
        batch: int, seq: int, kv_seq: int, heads: int, head: int, block_n: int,
        seed: int) -> None:
    values = arrays(batch=batch, seq=seq, kv_seq=kv_seq, heads=heads, head=head,
                    bias_shape=(batch, 1, 1, kv_seq), seed=seed)
    expected = PLUGIN.reference(*values.values(), num_heads=heads, scale=0.3)[0]
    actual = blockwise_attention(*values.values(), num_heads=heads, scale=0.3, block_m=16,
                                 block_n=block_n)
    np.testing.assert_allclose(actual, expected, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize(("dtype", "atol"), TOLERANCES)
@pytest.mark.parametrize("bias_shape", [(1, 1, 1, 1), (2, 1, 1, 8), (2, 4, 8, 8)])
def test_decomposed_node_matches_the_reference(dtype: type, atol: float,
                                            bias_shape: tuple[int, ...]) -> None:
    values = arrays(bias_shape=bias_shape, dtype=dtype, head_v=6)
    attributes = {"num_heads": 4, "scale": 0.25}
    [actual] = run_decomposed(plugin_model(PLUGIN, values, attributes), values)
    [expected] = PLUGIN.reference(*values.values(), **attributes)
    assert actual.dtype == expected.dtype and actual.shape == (2, 8, 24)
    np.testing.assert_allclose(actual.astype(np.float32), expected.astype(np.float32),
                               atol=atol, rtol=1e-3)


def test_shape_inference_gives_batch_sequence_and_value_width() -> None:
    values = arrays(seq=5, kv_seq=9, head=8, head_v=16, bias_shape=(2, 1, 1, 9))
    model = plugin_model(PLUGIN, values, {"num_heads": 4, "scale": 1.0})
    [output] = model.graph.output
    assert [d.dim_value for d in output.type.tensor_type.shape.dim] == [2, 5, 64]


@pytest.mark.parametrize(
    ("change", "attributes", "message"),
    [
        ({}, {"num_heads": 3, "scale": 1.0}, "not a multiple of num_heads=3"),
        ({"attention_bias": np.zeros((2, 4, 8, 5), np.float32)}, {}, "does not broadcast"),
        ({"attention_bias": np.zeros((8, 8), np.float32)}, {}, "rank 2"),
        ({"key": np.zeros((2, 8, 16), np.float32)}, {}, "differ in batch or hidden size"),
        ({}, {"num_heads": 0, "scale": 1.0}, "num_heads is 0"),
    ],
    ids=["heads", "bias-broadcast", "bias-rank", "key-width", "zero-heads"],
)
def test_shape_inference_refuses_what_the_kernel_cannot_take(
        change: dict, attributes: dict, message: str) -> None:
    values = {**arrays(), **change}
    with pytest.raises(onnx.shape_inference.InferenceError, match=message):
        plugin_model(PLUGIN, values, attributes or {"num_heads": 4, "scale": 1.0})


def test_kernel_takes_what_the_registration_compiles() -> None:
    source = (Path(PLUGIN.readme).parent / "kernel.py").read_text()
    runtime, constexprs = kernel_parameters(source, "multi_head_attention_kernel")
    assert runtime == list(kernel_signature("*fp16"))
    assert sorted(constexprs) == sorted(kernel_constexprs(
        num_heads=12, head_size=64, head_size_v=64, scale=0.125, float32=False))


def test_kernel_tiles_and_bias_strides() -> None:
    assert tiles(64, 64) == (64, 64, 64, 64)
    assert tiles(80, 80) == (64, 32, 128, 128)  # padded to a power of two, masked
    assert tiles(8, 200) == (32, 32, 16, 256)
    with pytest.raises(ValueError, match="outside the kernel.s 1..256"):
        tiles(320, 64)
    assert bias_strides((1, 1, 1, 1)) == (0, 0, 0, 0)
    assert bias_strides((4, 1, 1, 128)) == (128, 0, 0, 1)
    assert bias_strides((1, 12, 128, 128)) == (0, 128 * 128, 128, 1)
    assert kernel_constexprs(num_heads=2, head_size=8, head_size_v=8, scale=1.0,
                             float32=True)["DOT_PRECISION"] == "ieee"
