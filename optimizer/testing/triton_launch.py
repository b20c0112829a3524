"""Launch the plugins' Triton kernels on torch tensors, with TensorRT's grid, constexprs and warps.

For the GPU checks (tests/gpu/, bench/plugins_gpu.py), which compare the kernels with their
numpy references and time them; a test harness, so it lives in optimizer.testing. Each
launch function checks its tensors, allocates the outputs and launches the kernel as the
plugin's trt_registration.py has TensorRT launch it: the constexprs, warps and limits come from
the plugin's geometry.py, which both load (tests/optimizer/plugins/test_geometry.py), and the
grid and int32 arguments are held equal by tests/gpu/test_launch_matches_registration.py.
CUDA tensors run the compiled kernel; CPU tensors run it through Triton's interpreter
(enable_interpreter), so the kernels execute, slowly, on machines without a GPU.

    out, total = skip_layer_norm(x, skip, gamma, beta, bias, epsilon=1e-5)
    out = bias_gelu(x, bias, approximate="none", alignment_hints=False)

`alignment_hints=False` launches the kernel as TensorRT's AOT build compiles it:
trt_aot.compile_kernel passes no attributes, so Triton knows neither that the pointers are
16-byte aligned nor that an int argument is a multiple of 16, and cannot vectorize what depends
on them. The default (True) is Triton's JIT specialization, what a torch caller gets.

Loads without the optimizer.plugins package, whose __init__ needs onnx and onnx_ir (absent on a
GPU machine that only has numpy, torch and triton): this module imports no optimizer module
(optimizer/__init__.py and optimizer/testing/__init__.py import nothing, so importing it as
`optimizer.testing.triton_launch` is safe there) and reads a plugin's kernel.py, reference.py
or geometry.py by path (load_plugin_file). torch and triton are imported when first needed.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.util
import inspect
import os
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

__all__ = [
    "BIAS_GELU_BLOCK",
    "MAX_HEAD_SIZE",
    "MAX_HIDDEN",
    "LaunchParameters",
    "bias_gelu",
    "bias_gelu_parameters",
    "bias_strides",
    "despecialization_supported",
    "enable_interpreter",
    "interpreter_enabled",
    "load_plugin_file",
    "multi_head_attention",
    "multi_head_attention_parameters",
    "skip_layer_norm",
    "skip_layer_norm_parameters",
]

_PLUGINS_DIR = Path(__file__).resolve().parents[1] / "plugins"
_INTERPRET = "TRITON_INTERPRET"

# Each kernel's runtime int32 arguments and pointers: what TensorRT's AOT build specializes on
# nothing (alignment_hints=False).
_KERNEL_ARGUMENTS: Mapping[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "skip_layer_norm": (("n_cols",), ("X", "SKIP", "GAMMA", "BETA", "BIAS", "OUT", "SUM")),
    "bias_gelu": (("n_elements", "n_cols"), ("X", "BIAS", "OUT")),
    "multi_head_attention": (
        ("seq_q", "seq_kv", "bias_stride_b", "bias_stride_n", "bias_stride_s", "bias_stride_t"),
        ("Q", "K", "V", "BIAS", "OUT")),
}


@dataclass(frozen=True)
class LaunchParameters:
    """One launch: the grid, the compiled-in constexprs and the warps per program."""

    grid: tuple[int, ...]
    constexprs: dict[str, int | float | bool | str]
    num_warps: int


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


@contextlib.contextmanager
def _interpreter_variable(enabled: bool) -> Iterator[None]:
    """TRITON_INTERPRET set (or unset) for the scope, restored after it."""
    before = os.environ.get(_INTERPRET)
    if enabled:
        os.environ[_INTERPRET] = "1"
    else:
        os.environ.pop(_INTERPRET, None)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(_INTERPRET, None)
        else:
            os.environ[_INTERPRET] = before


def interpreter_enabled() -> bool:
    """Whether this process imported triton for its interpreter (see enable_interpreter)."""
    triton: Any = sys.modules.get("triton")
    if triton is None:
        return False
    zeros = getattr(triton.language, "zeros", None)  # one of Triton's own @jit functions
    return type(zeros).__name__ == "InterpretedFunction"


def despecialization_supported() -> bool:
    """Whether this Triton can launch without alignment hints (alignment_hints=False needs
    triton.jit's do_not_specialize_on_alignment)."""
    triton: Any = importlib.import_module("triton")
    return "do_not_specialize_on_alignment" in inspect.signature(triton.jit).parameters


def enable_interpreter() -> None:
    """Run this process's launches on CPU tensors through Triton's interpreter.

    Triton decorates its own @jit library (tl.zeros, tl.sum, ...) when it is imported, and the
    interpreter runs only interpreted functions: so this imports triton with TRITON_INTERPRET=1
    and must come before anything else imports triton. The variable is unset again afterwards,
    so subprocesses do not inherit it; CPU launches set it while they run. The process can then
    no longer compile Triton kernels for a GPU. Idempotent.

    Raises:
        RuntimeError: triton was already imported for compilation.
    """
    if "triton" not in sys.modules:
        with _interpreter_variable(True):
            importlib.import_module("triton")
    if not interpreter_enabled():
        raise RuntimeError("triton was imported for compilation before enable_interpreter() "
                           "ran, so its interpreter cannot run the kernels; call it before "
                           "anything imports triton (or run the CPU checks in a new process)")


@functools.cache
def load_plugin_file(plugin: str, module: str, *, interpret: bool = False) -> ModuleType:
    """optimizer/plugins/<plugin>/<module>.py, executed as a standalone module (its package's
    __init__ is not run). `interpret=True` makes its @triton.jit kernels run in Triton's
    interpreter (CPU tensors; see enable_interpreter).

    Raises:
        FileNotFoundError: no such plugin file.
    """
    path = _PLUGINS_DIR / plugin / f"{module}.py"
    if not path.is_file():
        known = sorted(p.parent.name for p in _PLUGINS_DIR.glob("*/kernel.py"))
        raise FileNotFoundError(f"no plugin file {path}; plugins with kernels: {known}")
    name = f"_fuseforge_{plugin}_{module}{'_interpreted' if interpret else ''}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise FileNotFoundError(f"cannot load {path} as a Python module")
    loaded = importlib.util.module_from_spec(spec)
    sys.modules[name] = loaded  # as an import would: dataclasses and pickle look modules up there
    with _interpreter_variable(interpret):
        spec.loader.exec_module(loaded)
    return loaded


def _geometry(plugin: str) -> ModuleType:
    """optimizer/plugins/<plugin>/geometry.py: the launch sizes and constants its
    trt_registration.py builds engines with (one definition; it imports only the stdlib)."""
    return load_plugin_file(plugin, "geometry")


# The plugins' limits and block size, read from their geometry (not their packages, which this
# module must not import).
MAX_HIDDEN: int = _geometry("skip_layer_norm").MAX_HIDDEN
BIAS_GELU_BLOCK: int = _geometry("bias_gelu").BLOCK
MAX_HEAD_SIZE: int = _geometry("multi_head_attention").MAX_HEAD_SIZE


@functools.cache
def _kernel(plugin: str, interpret: bool, alignment_hints: bool) -> Any:
    """The plugin's @triton.jit kernel: interpreted, JIT-specialized, or unspecialized."""
    if interpret != interpreter_enabled():
        raise RuntimeError(
            f"{plugin}_kernel: CPU tensors need Triton's interpreter (call enable_interpreter() "
            "before anything imports triton) and CUDA tensors a process without it"
            if interpret else
            f"{plugin}_kernel: this process imported triton for its interpreter "
            "(enable_interpreter), so it cannot compile for CUDA; launch from a new process")
    kernel = getattr(load_plugin_file(plugin, "kernel", interpret=interpret), f"{plugin}_kernel")
    if interpret or alignment_hints:
        return kernel
    if not despecialization_supported():
        raise RuntimeError(f"{plugin}_kernel: this Triton's jit has no "
                           "do_not_specialize_on_alignment, so it cannot launch without "
                           "alignment hints; use alignment_hints=True")
    triton: Any = importlib.import_module("triton")
    ints, pointers = _KERNEL_ARGUMENTS[plugin]
    names = list(kernel.arg_names)
    return triton.jit(kernel.fn, do_not_specialize=[names.index(n) for n in ints],
                      do_not_specialize_on_alignment=[names.index(n) for n in pointers])


def _launch(plugin: str, params: LaunchParameters, args: list[Any], device: torch.device,
            alignment_hints: bool) -> None:
    interpret = device.type == "cpu"
    kernel = _kernel(plugin, interpret, alignment_hints)
    # The interpreter consults TRITON_INTERPRET while it runs (e.g. on Triton's lazy imports).
    with _interpreter_variable(True) if interpret else contextlib.nullcontext():
        kernel[params.grid](*args, **params.constexprs, num_warps=params.num_warps)


def _check_tensors(op: str, tensors: Mapping[str, torch.Tensor]) -> torch.dtype:
    """The one float dtype of `tensors`, all contiguous on one device.

    Raises:
        ValueError: naming the tensor whose dtype, device or layout differs.
    """
    import torch

    floats = (torch.float32, torch.float16, torch.bfloat16)
    (first, reference), *_ = tensors.items()
    for name, tensor in tensors.items():
        if tensor.dtype not in floats or tensor.dtype != reference.dtype:
            raise ValueError(f"{op}: {name} has dtype {tensor.dtype} and {first} "
                             f"{reference.dtype}; all tensors must share one of {floats}")
        if tensor.device != reference.device:
            raise ValueError(f"{op}: {name} is on {tensor.device} and {first} on "
                             f"{reference.device}; move them to one device")
        if not tensor.is_contiguous():
            raise ValueError(f"{op}: {name} (shape {tuple(tensor.shape)}, strides "
                             f"{tensor.stride()}) is not contiguous; pass {name}.contiguous()")
    return reference.dtype


def _check_vectors(op: str, hidden: int, vectors: Mapping[str, torch.Tensor]) -> None:
    for name, vector in vectors.items():
        if tuple(vector.shape) != (hidden,):
            raise ValueError(f"{op}: {name} has shape {tuple(vector.shape)}, expected "
                             f"({hidden},) (the input's last size)")


def skip_layer_norm_parameters(rows: int, hidden: int, epsilon: float, *,
                               store_sum: bool = True) -> LaunchParameters:
    """One program per row; the plugin's geometry gives the constexprs and warps. TensorRT
    always stores the sum (store_sum=True).

    Raises:
        ValueError: `hidden` is not in 1..MAX_HIDDEN.
    """
    geometry = _geometry("skip_layer_norm")
    constexprs: dict[str, int | float | bool | str] = geometry.kernel_constexprs(
        hidden, epsilon, store_sum=store_sum)
    return LaunchParameters(grid=(rows,), constexprs=constexprs,
                            num_warps=geometry.row_warps(int(constexprs["BLOCK"])))


def skip_layer_norm(input: torch.Tensor, skip: torch.Tensor, gamma: torch.Tensor,
                    beta: torch.Tensor, bias: torch.Tensor, *, epsilon: float,
                    store_sum: bool = True, alignment_hints: bool = True,
                    ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(output, input + skip + bias or None when not `store_sum`), as the plugin computes them.

    Raises:
        ValueError: mixed dtypes or devices, a non-contiguous tensor, skip shaped unlike
            input, gamma/beta/bias not [H], or H above MAX_HIDDEN.
    """
    import torch

    op = "SkipLayerNorm"
    _check_tensors(op, {"input": input, "skip": skip, "gamma": gamma, "beta": beta,
                        "bias": bias})
    if input.dim() < 1 or skip.shape != input.shape:
        raise ValueError(f"{op}: input {tuple(input.shape)} and skip {tuple(skip.shape)} must "
                         "have one shape of rank >= 1 (skip is not broadcast)")
    hidden = input.shape[-1]
    _check_vectors(op, hidden, {"gamma": gamma, "beta": beta, "bias": bias})
    params = skip_layer_norm_parameters(input.numel() // max(hidden, 1), hidden, epsilon,
                                        store_sum=store_sum)
    output = torch.empty_like(input)
    total = torch.empty_like(input) if store_sum else None
    if input.numel():
        # Without STORE_SUM the kernel never touches SUM: any valid pointer will do.
        _launch("skip_layer_norm", params,
                [input, skip, gamma, beta, bias, hidden, output,
                 total if total is not None else output],
                input.device, alignment_hints)
    return output, total


def bias_gelu_parameters(n_elements: int, approximate: str) -> LaunchParameters:
    """BIAS_GELU_BLOCK elements per program, 4 warps; the approximation compiled in.

    Raises:
        ValueError: `approximate` is neither "none" nor "tanh", or too many elements.
    """
    if approximate not in ("none", "tanh"):
        raise ValueError(f"BiasGelu approximate must be 'none' or 'tanh', got {approximate!r}")
    if n_elements >= 2**31:
        raise ValueError(f"BiasGelu input has {n_elements} elements; the kernel's int32 "
                         "arguments take fewer than 2**31")
    geometry = _geometry("bias_gelu")
    return LaunchParameters(grid=(_cdiv(n_elements, BIAS_GELU_BLOCK),),
                            constexprs=geometry.kernel_constexprs(approximate),
                            num_warps=geometry.NUM_WARPS)


def bias_gelu(input: torch.Tensor, bias: torch.Tensor, *, approximate: str,
              alignment_hints: bool = True) -> torch.Tensor:
    """GELU(input + bias), as the plugin computes it.

    Raises:
        ValueError: mixed dtypes or devices, a non-contiguous tensor, bias not [H], an
            unknown `approximate`, or 2**31 elements or more.
    """
    import torch

    op = "BiasGelu"
    _check_tensors(op, {"input": input, "bias": bias})
    if input.dim() < 1:
        raise ValueError(f"{op}: input is a scalar; the bias is added along its last axis")
    _check_vectors(op, input.shape[-1], {"bias": bias})
    params = bias_gelu_parameters(input.numel(), approximate)
    output = torch.empty_like(input)
    if input.numel():
        _launch("bias_gelu", params, [input, bias, input.numel(), input.shape[-1], output],
                input.device, alignment_hints)
    return output


def bias_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    """Strides (in elements) of a contiguous 4-D bias, 0 along its size-1 (broadcast) dims:
    the plugin geometry's, as TensorRT passes them.

    >>> bias_strides((2, 1, 8, 16))
    (128, 0, 16, 1)
    """
    return tuple(_geometry("multi_head_attention").bias_strides(shape))


def multi_head_attention_parameters(*, batch: int, seq_q: int, num_heads: int, head_size: int,
                                    head_size_v: int, scale: float,
                                    float32: bool) -> LaunchParameters:
    """Grid (ceil(S / BLOCK_M), B*N); the constexprs (tiles, IEEE dot products for float32)
    and warps of the plugin's geometry.

    Raises:
        ValueError: a head size outside 1..MAX_HEAD_SIZE.
    """
    geometry = _geometry("multi_head_attention")
    constexprs: dict[str, int | float | bool | str] = geometry.kernel_constexprs(
        num_heads=num_heads, head_size=head_size, head_size_v=head_size_v, scale=scale,
        float32=float32)
    return LaunchParameters(grid=(_cdiv(seq_q, int(constexprs["BLOCK_M"])), batch * num_heads),
                            constexprs=constexprs, num_warps=geometry.NUM_WARPS)


def multi_head_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                         attention_bias: torch.Tensor, *, num_heads: int, scale: float,
                         alignment_hints: bool = True) -> torch.Tensor:
    """softmax(scale * Q Kᵀ + attention_bias) V per head: [B, S, N*Hv] from query [B, S, N*H],
    key [B, T, N*H], value [B, T, N*Hv] and a 4-D bias broadcasting to [B, N, S, T].

    Raises:
        ValueError: mixed dtypes or devices, a non-contiguous tensor, shapes that break the
            contract above, or head sizes outside 1..MAX_HEAD_SIZE.
    """
    import torch

    op = "MultiHeadAttention"
    dtype = _check_tensors(op, {"query": query, "key": key, "value": value,
                                "attention_bias": attention_bias})
    if query.dim() != 3 or key.dim() != 3 or value.dim() != 3:
        raise ValueError(f"{op}: query {tuple(query.shape)}, key {tuple(key.shape)} and value "
                         f"{tuple(value.shape)} must be 3-D [B, S or T, N*H]")
    batch, seq_q, hidden = query.shape
    seq_kv, hidden_v = key.shape[1], value.shape[2]
    if key.shape[0] != batch or key.shape[2] != hidden or value.shape[:2] != key.shape[:2]:
        raise ValueError(f"{op}: query {tuple(query.shape)}, key {tuple(key.shape)} and value "
                         f"{tuple(value.shape)} disagree in batch, hidden size or key length")
    if num_heads < 1 or hidden % num_heads or hidden_v % num_heads:
        raise ValueError(f"{op}: hidden sizes {hidden}/{hidden_v} are not multiples of "
                         f"num_heads={num_heads}")
    full = (batch, num_heads, seq_q, seq_kv)
    if attention_bias.dim() != 4 or not all(
            b in (1, f) for b, f in zip(attention_bias.shape, full, strict=True)):
        raise ValueError(f"{op}: attention_bias {tuple(attention_bias.shape)} does not "
                         f"broadcast to [B, N, S, T] = {list(full)} (each dim 1 or the full size)")
    params = multi_head_attention_parameters(
        batch=batch, seq_q=seq_q, num_heads=num_heads, head_size=hidden // num_heads,
        head_size_v=hidden_v // num_heads, scale=scale, float32=dtype == torch.float32)
    output = torch.empty((batch, seq_q, hidden_v), dtype=dtype, device=query.device)
    if output.numel():  # no keys (T = 0): 0 / 0 = NaN, as Softmax over nothing
        _launch("multi_head_attention", params,
                [query, key, value, attention_bias, seq_q, seq_kv,
                 *bias_strides(tuple(attention_bias.shape)), output],
                query.device, alignment_hints)
    return output
