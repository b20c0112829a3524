"""TensorRT registration of fuseforge::MultiHeadAttention: shapes, types, the AOT Triton kernel.

register() defines the plugin with `tensorrt.plugin`: the output descriptor ([B, S, N*Hv] of
query's type), the type combinations TensorRT may pick (the five tensors of one float type),
and an ahead-of-time implementation that compiles kernel.multi_head_attention_kernel for the
build's head sizes, num_heads and scale, with geometry.py's tiles. Batch and sequence lengths
may be dynamic (they reach the kernel as int32 arguments and in the grid); the hidden sizes and
attention_bias's shape must be static. There is no JIT (`@impl`) implementation, so an engine
never calls back into Python.

No `from __future__ import annotations` here: tensorrt.plugin reads the decorated functions'
annotations at run time and needs real classes, not strings.
"""

import functools

from optimizer.plugins.multi_head_attention.geometry import (
    NUM_WARPS,
    bias_strides,
    kernel_constexprs,
    tiles,
)
from optimizer.plugins.trt_aot import (
    compile_kernel,
    pointer_type,
    require_constant,
    same_type_combination,
)

__all__ = [
    "NUM_WARPS",
    "PLUGIN_ID",
    "bias_strides",
    "kernel_constexprs",
    "kernel_signature",
    "register",
    "tiles",
]

PLUGIN_ID = "fuseforge::MultiHeadAttention"
# tiles, bias_strides and kernel_constexprs are geometry.py's, which the GPU checks' launcher
# (optimizer/testing/triton_launch.py) loads too: re-exported here as this plugin's launch.


def kernel_signature(pointer: str) -> dict[str, str]:
    """The kernel's runtime arguments, typed, in TensorRT's launch order."""
    return {"Q": pointer, "K": pointer, "V": pointer, "BIAS": pointer,
            "seq_q": "i32", "seq_kv": "i32", "bias_stride_b": "i32", "bias_stride_n": "i32",
            "bias_stride_s": "i32", "bias_stride_t": "i32", "OUT": pointer}


@functools.cache
def register() -> str:
    """Register the plugin with TensorRT (once per process); returns its id.

    Raises:
        ImportError: TensorRT is not installed.
    """
    import tensorrt as trt
    import tensorrt.plugin as trtp

    def describe(query: trtp.TensorDesc, key: trtp.TensorDesc, value: trtp.TensorDesc,
                 attention_bias: trtp.TensorDesc, num_heads: int,
                 scale: float) -> trtp.TensorDesc:
        shape = query.shape_expr
        return trtp.from_shape_expr((shape[0], shape[1], value.shape_expr[2]), query.dtype)

    def autotune(query: trtp.TensorDesc, key: trtp.TensorDesc, value: trtp.TensorDesc,
                 attention_bias: trtp.TensorDesc,
                 outputs: tuple[trtp.TensorDesc]) -> list[trtp.AutoTuneCombination]:
        return [trtp.AutoTuneCombination(same_type_combination(5))]

    def aot_impl(query: trtp.TensorDesc, key: trtp.TensorDesc, value: trtp.TensorDesc,
                 attention_bias: trtp.TensorDesc, num_heads: int, scale: float,
                 outputs: tuple[trtp.TensorDesc], tactic: int,
                 ) -> tuple[str | bytes, str | bytes, trtp.KernelLaunchParams, trtp.SymExprs]:
        from optimizer.plugins.multi_head_attention.kernel import multi_head_attention_kernel

        hidden = require_constant(query.shape_expr[2], "the query hidden size (N*H)")
        hidden_v = require_constant(value.shape_expr[2], "the value hidden size (N*Hv)")
        if hidden % num_heads or hidden_v % num_heads:
            raise ValueError(f"hidden sizes {hidden}/{hidden_v} are not multiples of "
                             f"num_heads={num_heads}")
        constexprs = kernel_constexprs(
            num_heads=num_heads, head_size=hidden // num_heads,
            head_size_v=hidden_v // num_heads, scale=scale,
            float32=query.dtype == trt.DataType.FLOAT)
        kernel = compile_kernel(multi_head_attention_kernel,
                                kernel_signature(pointer_type(query.dtype)), constexprs,
                                num_warps=NUM_WARPS)
        seq_q, seq_kv = query.shape_expr[1], key.shape_expr[1]
        launch = trtp.KernelLaunchParams()
        launch.grid_x = trtp.cdiv(seq_q, int(constexprs["BLOCK_M"]))
        launch.grid_y = query.shape_expr[0] * num_heads
        launch.block_x = kernel.num_warps * 32
        launch.shared_mem = kernel.shared_mem
        bias_shape = tuple(require_constant(attention_bias.shape_expr[i], "attention_bias's shape")
                           for i in range(4))
        extra_args = trtp.SymIntExprs.from_tuple(
            [trtp.SymInt32(seq_q), trtp.SymInt32(seq_kv),
             *(trtp.SymInt32(stride) for stride in bias_strides(bias_shape))])
        return kernel.name, kernel.ptx, launch, extra_args

    # Called rather than used as decorators: without TensorRT's stubs they are untyped.
    trtp.register(PLUGIN_ID)(describe)
    trtp.autotune(PLUGIN_ID)(autotune)
    trtp.aot_impl(PLUGIN_ID)(aot_impl)
    return PLUGIN_ID
