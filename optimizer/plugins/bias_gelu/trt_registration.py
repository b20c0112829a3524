"""TensorRT registration of fuseforge::BiasGelu: shapes, types, and the AOT Triton kernel.

register() defines the plugin with `tensorrt.plugin`: the output descriptor (like the input),
the type combinations TensorRT may pick (input, bias and output of one float type), and an
ahead-of-time implementation that compiles kernel.bias_gelu_kernel for the node's
approximation, BLOCK elements per program. Shapes may be dynamic: the element count and the
hidden size are passed to the kernel as int32 arguments. There is no JIT (`@impl`)
implementation, so an engine never calls back into Python.

No `from __future__ import annotations` here: tensorrt.plugin reads the decorated functions'
annotations at run time and needs real classes, not strings.
"""

import functools

from optimizer.plugins.bias_gelu import geometry
from optimizer.plugins.bias_gelu.geometry import BLOCK, NUM_WARPS
from optimizer.plugins.bias_gelu.reference import APPROXIMATIONS
from optimizer.plugins.trt_aot import compile_kernel, pointer_type, same_type_combination

__all__ = ["BLOCK", "NUM_WARPS", "PLUGIN_ID", "kernel_constexprs", "kernel_signature", "register"]

PLUGIN_ID = "fuseforge::BiasGelu"


def kernel_signature(pointer: str) -> dict[str, str]:
    """The kernel's runtime arguments, typed, in TensorRT's launch order."""
    return {"X": pointer, "BIAS": pointer, "n_elements": "i32", "n_cols": "i32", "OUT": pointer}


def kernel_constexprs(approximate: str) -> dict[str, int | float | bool | str]:
    """What the kernel is compiled for.

    Raises:
        ValueError: `approximate` is neither "none" nor "tanh".
    """
    if approximate not in APPROXIMATIONS:
        raise ValueError(f"BiasGelu approximate must be one of {APPROXIMATIONS}, "
                         f"got {approximate!r}")
    return geometry.kernel_constexprs(approximate)


@functools.cache
def register() -> str:
    """Register the plugin with TensorRT (once per process); returns its id.

    Raises:
        ImportError: TensorRT is not installed.
    """
    import tensorrt.plugin as trtp

    def describe(x: trtp.TensorDesc, bias: trtp.TensorDesc, approximate: str) -> trtp.TensorDesc:
        return x.like()

    def autotune(x: trtp.TensorDesc, bias: trtp.TensorDesc,
                 outputs: tuple[trtp.TensorDesc]) -> list[trtp.AutoTuneCombination]:
        return [trtp.AutoTuneCombination(same_type_combination(3))]

    def aot_impl(x: trtp.TensorDesc, bias: trtp.TensorDesc, approximate: str,
                 outputs: tuple[trtp.TensorDesc], tactic: int,
                 ) -> tuple[str | bytes, str | bytes, trtp.KernelLaunchParams, trtp.SymExprs]:
        from optimizer.plugins.bias_gelu.kernel import bias_gelu_kernel

        kernel = compile_kernel(bias_gelu_kernel, kernel_signature(pointer_type(x.dtype)),
                                kernel_constexprs(approximate), num_warps=NUM_WARPS)
        n_elements = x.shape_expr.numel()
        launch = trtp.KernelLaunchParams()
        launch.grid_x = trtp.cdiv(n_elements, BLOCK)
        launch.block_x = kernel.num_warps * 32
        launch.shared_mem = kernel.shared_mem
        extra_args = trtp.SymIntExprs.from_tuple(
            [trtp.SymInt32(n_elements), trtp.SymInt32(x.shape_expr[x.ndim - 1])])
        return kernel.name, kernel.ptx, launch, extra_args

    # Called rather than used as decorators: without TensorRT's stubs they are untyped.
    trtp.register(PLUGIN_ID)(describe)
    trtp.autotune(PLUGIN_ID)(autotune)
    trtp.aot_impl(PLUGIN_ID)(aot_impl)
    return PLUGIN_ID
