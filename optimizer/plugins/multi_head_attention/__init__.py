"""fuseforge.MultiHeadAttention: scaled dot-product attention over heads, in one op.

The op TensorRT's ONNX parser lacks: see README.md for why this one.
"""

from pathlib import Path

from optimizer.plugins.base import Attribute, Parameter, Plugin
from optimizer.plugins.multi_head_attention.decompose import decompose
from optimizer.plugins.multi_head_attention.geometry import MAX_HEAD_SIZE
from optimizer.plugins.multi_head_attention.reference import multi_head_attention
from optimizer.plugins.multi_head_attention.schema import infer_shapes

__all__ = ["MAX_HEAD_SIZE", "PLUGIN"]


PLUGIN = Plugin(
    name="multi_head_attention",
    op_type="MultiHeadAttention",
    summary="softmax(scale * Q Kᵀ + attention_bias) V for every head, FlashAttention-style: "
            "the [S, T] scores never reach memory.",
    replaces="the head split (Reshape [B, S, N, H] + Transpose) of query, key and value, "
             "MatMul(Q, Kᵀ), scale Mul/Div, the additive mask Add, Softmax(-1), MatMul with V "
             "and the head merge (Transpose + Reshape); also com.microsoft.MultiHeadAttention "
             "with separate 3-D query, key and value",
    inputs=(
        Parameter("query", "[B, S, N*H]"),
        Parameter("key", "[B, T, N*H]"),
        Parameter("value", "[B, T, N*Hv]"),
        Parameter("attention_bias", "added to the scaled scores; 4-D, each dim 1 (broadcast) "
                                    "or that of [B, N, S, T]; a [1, 1, 1, 1] zero when the "
                                    "model has no mask"),
    ),
    outputs=(Parameter("output", "[B, S, N*Hv], heads side by side"),),
    attributes=(
        Attribute("num_heads", "int", "N"),
        Attribute("scale", "float", "multiplies Q Kᵀ (1/√H in the usual attention)"),
    ),
    type_constraint=("tensor(float)", "tensor(float16)", "tensor(bfloat16)"),
    limits=(
        f"head sizes H and Hv at most {MAX_HEAD_SIZE}; hidden sizes and attention_bias's shape "
        "static at engine build time (batch and sequence lengths may be dynamic)",
        "no causal flag, key padding mask, packed QKV, past key/value or dropout: a mask is "
        "an additive attention_bias",
        "softmax and both products accumulate in float32; the softmax weights are rounded to "
        "the value type before the product with V (as FlashAttention does)",
        "a row whose bias is -inf everywhere gives NaN, as Softmax does",
        "tensors of fewer than 2**31 elements (int32 indexing within a batch)",
    ),
    reference=multi_head_attention,
    decompose=decompose,
    infer_shapes=infer_shapes,
    readme=Path(__file__).with_name("README.md"),
    trt_registration="optimizer.plugins.multi_head_attention.trt_registration",
)
