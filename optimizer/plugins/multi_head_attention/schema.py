"""Shape inference of fuseforge.MultiHeadAttention: output [B, S, N*Hv] of query's type.

query [B, S, N*H], key [B, T, N*H] and value [B, T, N*Hv] are 3-D (the heads side by side in
the last axis); attention_bias is 4-D and each of its dims is 1 (broadcast) or [B, N, S, T]'s;
num_heads is positive and divides the query and value hidden sizes.
"""

from __future__ import annotations

from onnx.shape_inference import InferenceContext

from optimizer.plugins.shape_inference import (
    Dim,
    attribute,
    check_trt_attributes,
    fail,
    input_shape,
    same_dim,
    same_element_type,
    set_output,
)

__all__ = ["infer_shapes"]


def _rank(ctx: InferenceContext, index: int, name: str, rank: int) -> list[Dim] | None:
    shape = input_shape(ctx, index)
    if shape is not None and len(shape) != rank:
        raise fail(ctx, f"{name} has rank {len(shape)} ({shape}), expected {rank}")
    return shape


def _divided(ctx: InferenceContext, dim: Dim, num_heads: int, name: str) -> None:
    if isinstance(dim, int) and dim % num_heads:
        raise fail(ctx, f"{name}'s hidden size {dim} is not a multiple of num_heads={num_heads}")


def infer_shapes(ctx: InferenceContext) -> None:
    check_trt_attributes(ctx)
    num_heads = attribute(ctx, "num_heads")
    if not isinstance(num_heads, int) or num_heads < 1:
        raise fail(ctx, f"num_heads is {num_heads!r}, expected a positive int")
    elem_type = same_element_type(ctx)
    query = _rank(ctx, 0, "query", 3)
    key = _rank(ctx, 1, "key", 3)
    value = _rank(ctx, 2, "value", 3)
    bias = _rank(ctx, 3, "attention_bias", 4)
    batch, seq_q, seq_kv = (query[0] if query else None, query[1] if query else None,
                            key[1] if key else None)
    if query and key and not (same_dim(query[0], key[0]) and same_dim(query[2], key[2])):
        raise fail(ctx, f"query {query} and key {key} differ in batch or hidden size")
    if key and value and not (same_dim(key[0], value[0]) and same_dim(key[1], value[1])):
        raise fail(ctx, f"key {key} and value {value} differ in batch or sequence length")
    if query:
        _divided(ctx, query[2], num_heads, "query")
    if value:
        _divided(ctx, value[2], num_heads, "value")
    if bias is not None:
        full = (batch, num_heads, seq_q, seq_kv)
        if not all(b == 1 or same_dim(b, f) for b, f in zip(bias, full, strict=True)):
            raise fail(ctx, f"attention_bias {bias} does not broadcast to [B, N, S, T] = "
                            f"{list(full)} (each dim 1 or the full size)")
    out = None if query is None else [query[0], query[1], value[2] if value else None]
    set_output(ctx, 0, elem_type, out)
