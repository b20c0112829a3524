"""What the plugins' TensorRT registrations share: types, shape checks, and the AOT compile.

TensorRT's AOT plugin path (`@tensorrt.plugin.aot_impl`) takes a compiled kernel (name and PTX),
its launch grid and its int32 extra arguments; TensorRT launches it with the input pointers,
then the extra arguments, then the output pointers, and stores the PTX in the engine, so the
engine runs without Python. The kernels are Triton kernels compiled here with
`triton.compile(ASTSource(...))` (Triton >= 3.2 API: signature and constexprs keyed by name),
as NVIDIA's quickly_deployable_plugins sample does (it pins triton==3.2.0). Later Triton
releases add hidden kernel parameters (global/profile scratch pointers) that TensorRT's
launcher may not pass: check the kernels on a GPU before moving the workers past 3.2.

`tensorrt` and `triton` are imported only inside the functions that need them: this module
imports on a machine that has neither.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import tensorrt as trt
    import tensorrt.plugin as trtp

__all__ = [
    "CompiledKernel",
    "compile_kernel",
    "pointer_type",
    "require_constant",
    "same_type_combination",
]

# TensorRT's autotune grammar: one entry per input and output, "|" lists the types allowed.
_TYPES = "FP32|FP16|BF16"


@dataclass(frozen=True)
class CompiledKernel:
    name: bytes
    ptx: bytes
    num_warps: int
    shared_mem: int


def same_type_combination(count: int) -> str:
    """An AutoTuneCombination spec binding `count` inputs and outputs to one float type.

    >>> same_type_combination(3)
    'FP32|FP16|BF16, FP32|FP16|BF16, FP32|FP16|BF16'
    """
    return ", ".join([_TYPES] * count)


def pointer_type(dtype: trt.DataType) -> str:
    """The Triton signature type of a pointer to `dtype` elements.

    Raises:
        ValueError: `dtype` is not float32, float16 or bfloat16.
    """
    import tensorrt as trt

    names = {trt.DataType.FLOAT: "*fp32", trt.DataType.HALF: "*fp16", trt.DataType.BF16: "*bf16"}
    found = names.get(dtype)
    if found is None:
        raise ValueError(f"the fuseforge plugins take float32, float16 or bfloat16, not {dtype}")
    return found


def require_constant(expr: trtp.ShapeExpr, what: str) -> int:
    """The value of a dimension that the kernel is specialized on at build time.

    Raises:
        ValueError: the dimension is dynamic (give it a fixed size in the optimization profile).
    """
    if not expr.is_constant:
        raise ValueError(f"{what} must be static (the kernel is compiled for it); give it one "
                         "size in min/opt/max of the optimization profile")
    return int(expr.constant_value())


def compile_kernel(fn: Any, signature: Mapping[str, str],
                   constexprs: Mapping[str, int | float | bool | str], *,
                   num_warps: int) -> CompiledKernel:
    """Compile Triton kernel `fn` for the GPU this runs on.

    `signature` types every runtime argument by name ("*fp16", "i32"); `constexprs` gives the
    compile-time ones.
    """
    import triton
    from triton.compiler import ASTSource

    full_signature = {**signature, **{name: "constexpr" for name in constexprs}}
    source = ASTSource(fn=fn, signature=full_signature, constexprs=dict(constexprs))
    compiled = triton.compile(source, options={"num_warps": num_warps})
    return CompiledKernel(name=compiled.metadata.name.encode(), ptx=compiled.asm["ptx"].encode(),
                          num_warps=int(compiled.metadata.num_warps),
                          shared_mem=int(compiled.metadata.shared))
