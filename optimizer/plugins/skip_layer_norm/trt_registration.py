"""TensorRT registration of fuseforge::SkipLayerNorm: shapes, types, and the AOT Triton kernel.

register() defines the plugin with `tensorrt.plugin`: the output descriptors (both outputs like
the input), the type combinations TensorRT may pick (all seven tensors of one float type), and
an ahead-of-time implementation that compiles kernel.skip_layer_norm_kernel for the build's
hidden size and epsilon, one program per row. There is no JIT (`@impl`) implementation, so an
engine never calls back into Python.

No `from __future__ import annotations` here: tensorrt.plugin reads the decorated functions'
annotations at run time and needs real classes, not strings.
"""

import functools

from optimizer.plugins.skip_layer_norm.geometry import kernel_constexprs, row_warps
from optimizer.plugins.trt_aot import (
    compile_kernel,
    pointer_type,
    require_constant,
    same_type_combination,
)

__all__ = ["PLUGIN_ID", "kernel_constexprs", "kernel_signature", "register", "row_warps"]

PLUGIN_ID = "fuseforge::SkipLayerNorm"
# kernel_constexprs and row_warps are geometry.py's, which the GPU checks' launcher
# (optimizer/testing/triton_launch.py) loads too: re-exported here as this plugin's launch.


def kernel_signature(pointer: str) -> dict[str, str]:
    """The kernel's runtime arguments, typed, in TensorRT's launch order."""
    return {"X": pointer, "SKIP": pointer, "GAMMA": pointer, "BETA": pointer, "BIAS": pointer,
            "n_cols": "i32", "OUT": pointer, "SUM": pointer}


@functools.cache
def register() -> str:
    """Register the plugin with TensorRT (once per process); returns its id.

    Raises:
        ImportError: TensorRT is not installed.
    """
    import tensorrt.plugin as trtp

    def describe(x: trtp.TensorDesc, skip: trtp.TensorDesc, gamma: trtp.TensorDesc,
                 beta: trtp.TensorDesc, bias: trtp.TensorDesc,
                 epsilon: float) -> tuple[trtp.TensorDesc, trtp.TensorDesc]:
        return x.like(), x.like()

    def autotune(x: trtp.TensorDesc, skip: trtp.TensorDesc, gamma: trtp.TensorDesc,
                 beta: trtp.TensorDesc, bias: trtp.TensorDesc,
                 outputs: tuple[trtp.TensorDesc, trtp.TensorDesc],
                 ) -> list[trtp.AutoTuneCombination]:
        return [trtp.AutoTuneCombination(same_type_combination(7))]

    def aot_impl(x: trtp.TensorDesc, skip: trtp.TensorDesc, gamma: trtp.TensorDesc,
                 beta: trtp.TensorDesc, bias: trtp.TensorDesc, epsilon: float,
                 outputs: tuple[trtp.TensorDesc, trtp.TensorDesc], tactic: int,
                 ) -> tuple[str | bytes, str | bytes, trtp.KernelLaunchParams, trtp.SymExprs]:
        from optimizer.plugins.skip_layer_norm.kernel import skip_layer_norm_kernel

        hidden_expr = x.shape_expr[x.ndim - 1]
        hidden = require_constant(hidden_expr, "the hidden (last) size of SkipLayerNorm")
        constexprs = kernel_constexprs(hidden, epsilon)
        kernel = compile_kernel(skip_layer_norm_kernel, kernel_signature(pointer_type(x.dtype)),
                                constexprs, num_warps=row_warps(int(constexprs["BLOCK"])))
        launch = trtp.KernelLaunchParams()
        launch.grid_x = x.shape_expr.numel() // hidden  # one program per row
        launch.block_x = kernel.num_warps * 32
        launch.shared_mem = kernel.shared_mem
        extra_args = trtp.SymIntExprs.from_tuple([trtp.SymInt32(hidden_expr)])
        return kernel.name, kernel.ptx, launch, extra_args

    # Called rather than used as decorators: without TensorRT's stubs they are untyped.
    trtp.register(PLUGIN_ID)(describe)
    trtp.autotune(PLUGIN_ID)(autotune)
    trtp.aot_impl(PLUGIN_ID)(aot_impl)
    return PLUGIN_ID
