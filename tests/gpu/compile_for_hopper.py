"""Compile every kernel as its TensorRT registration does, for an H100/H200 (sm_90), on the CPU.

    python -m tests.gpu.compile_for_hopper      # prints one JSON object per line

Runs trt_aot.compile_kernel itself, with the registrations' signatures, constexprs and warps;
with no GPU to ask for its architecture, triton.compile is pointed at sm_90 first (Triton
compiles to PTX and runs ptxas, both bundled with it, without a GPU). Each line reports what
TensorRT would receive: the kernel name, its shared memory, the PTX entry's parameter count
against the arguments TensorRT passes, the scratch memory Triton asks of the launcher (TensorRT
provides none), and whether global loads and stores came out vectorized.

Meant for a process of its own (tests/gpu/test_kernels_compile_for_hopper.py starts it): a
pytest process on a CPU machine holds the interpreter's triton, which cannot compile.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterator
from typing import Any

__all__ = ["CASES", "compile_case", "main"]

# (plugin, pointer type, registration kwargs) per case.
CASES: list[tuple[str, str, dict[str, Any]]] = [
    *[("skip_layer_norm", p, {"hidden": 1024, "epsilon": 1e-5})
      for p in ("*fp32", "*fp16", "*bf16")],
    ("skip_layer_norm", "*fp16", {"hidden": 1000, "epsilon": 1e-12}),
    ("skip_layer_norm", "*fp16", {"hidden": 16384, "epsilon": 1e-5}),
    *[("bias_gelu", p, {"approximate": "none"}) for p in ("*fp32", "*fp16", "*bf16")],
    ("bias_gelu", "*fp16", {"approximate": "tanh"}),
    *[("multi_head_attention", p, {"num_heads": 16, "head_size": 64, "head_size_v": 64,
                                   "scale": 0.125, "float32": p == "*fp32"})
      for p in ("*fp32", "*fp16", "*bf16")],
    ("multi_head_attention", "*fp16", {"num_heads": 8, "head_size": 128, "head_size_v": 128,
                                       "scale": 0.088, "float32": False}),
    *[("multi_head_attention", p, {"num_heads": 4, "head_size": 256, "head_size_v": 256,
                                   "scale": 0.0625, "float32": p == "*fp32"})
      for p in ("*fp32", "*fp16")],
    ("multi_head_attention", "*fp32", {"num_heads": 3, "head_size": 24, "head_size_v": 40,
                                       "scale": 0.2, "float32": True}),
]


def _registration_call(plugin: str, pointer: str,
                       options: dict[str, Any]) -> tuple[Any, dict[str, str], dict[str, Any], int]:
    """(kernel, signature, constexprs, num_warps) as the plugin's aot_impl computes them."""
    import importlib

    registration = importlib.import_module(f"optimizer.plugins.{plugin}.trt_registration")
    kernel = getattr(importlib.import_module(f"optimizer.plugins.{plugin}.kernel"),
                     f"{plugin}_kernel")
    signature = registration.kernel_signature(pointer)
    if plugin == "skip_layer_norm":
        constexprs = registration.kernel_constexprs(options["hidden"], options["epsilon"])
        warps = registration.row_warps(int(constexprs["BLOCK"]))
    elif plugin == "bias_gelu":
        constexprs = registration.kernel_constexprs(options["approximate"])
        warps = registration.NUM_WARPS
    else:
        constexprs = registration.kernel_constexprs(**options)
        warps = registration.NUM_WARPS
    return kernel, signature, constexprs, warps


def compile_case(plugin: str, pointer: str, options: dict[str, Any]) -> dict[str, Any]:
    """Compile one case through trt_aot.compile_kernel; what TensorRT would get, as a dict."""
    from optimizer.plugins.trt_aot import compile_kernel

    kernel, signature, constexprs, warps = _registration_call(plugin, pointer, options)
    compiled = compile_kernel(kernel, signature, constexprs, num_warps=warps)
    ptx = compiled.ptx.decode()
    entry = re.search(r"\.entry\s+(\w+)\s*\(([^)]*)\)", ptx)
    accesses = set(re.findall(r"(?:ld|st)\.global[\w.]*", ptx))
    return {"plugin": plugin, "pointer": pointer, "options": options,
            "name": compiled.name.decode(), "entry": entry.group(1) if entry else None,
            "ptx_params": entry.group(2).count(".param") if entry else None,
            "arguments": len(signature), "shared": compiled.shared_mem,
            "num_warps": compiled.num_warps, "scratch": _scratch_sizes(),
            "vectorized": any(".v2" in a or ".v4" in a for a in accesses),
            "accesses": sorted(accesses)}


_LAST_METADATA: dict[str, Any] = {}


def _scratch_sizes() -> dict[str, int]:
    metadata = _LAST_METADATA.get("metadata")
    return {name: int(getattr(metadata, name)) for name in
            ("global_scratch_size", "profile_scratch_size") if hasattr(metadata, name)}


def _target_hopper() -> None:
    """Point triton.compile at sm_90, and keep the last compile's metadata for _scratch_sizes."""
    import triton
    from triton.backends.compiler import GPUTarget

    compile_for_gpu = triton.compile

    @functools.wraps(compile_for_gpu)
    def compile_for_hopper(src: Any, target: Any = None, options: Any = None,
                           **kwargs: Any) -> Any:
        compiled = compile_for_gpu(src, target=GPUTarget("cuda", 90, 32), options=options,
                                   **kwargs)
        _LAST_METADATA["metadata"] = compiled.metadata
        return compiled

    triton.compile = compile_for_hopper


def results() -> Iterator[dict[str, Any]]:
    _target_hopper()
    for plugin, pointer, options in CASES:
        try:
            yield compile_case(plugin, pointer, options)
        except Exception as err:  # reported per case: one failure must not hide the others
            yield {"plugin": plugin, "pointer": pointer, "options": options,
                   "error": f"{type(err).__name__}: {err}"}


def main() -> None:
    for result in results():
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
