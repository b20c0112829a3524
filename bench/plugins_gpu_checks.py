"""Part 1 of bench/plugins_gpu.py: each Triton kernel against its numpy reference."""

from __future__ import annotations

import math
import traceback
from collections.abc import Callable
from functools import partial
from typing import Any

from bench.plugins_gpu_report import Check, Report
from optimizer.testing import kernel_cases, triton_launch
from optimizer.testing.kernel_checks import DTYPES, attention_atol, mismatch

__all__ = ["EPSILON", "check_correctness", "launch_variants", "run_check"]

EPSILON = 1e-5
# Correctness shapes: non-powers of two, ragged last blocks, each warp count and tile config.
SKIP_LAYER_NORM_SHAPES = [(33, 768), (5, 7, 1000), (16, 4096), (2, 16384)]
BIAS_GELU_SHAPES = [(37, 1000), (16, 4096), (5, 1500), (3, 64)]
# (name, batch, seq_q, seq_kv, num_heads, head_size, head_size_v, bias)
ATTENTION_CASES = [
    ("ragged", 2, 37, 77, 3, 24, 24, "none"),
    ("left-padding", 2, 65, 130, 2, 64, 64, "left_padding"),
    ("causal-head-128", 1, 33, 70, 2, 128, 128, "causal"),
    ("full-bias-head-256", 1, 20, 40, 2, 256, 256, "full"),
    ("value-head-differs", 2, 37, 50, 2, 24, 40, "per_head"),
]


def launch_variants(device: str, launch: Any) -> list[tuple[str, bool]]:
    """(name, alignment_hints) to check: the interpreter ignores hints, so only one there."""
    if device == "cpu":
        return [("interpreter", True)]
    variants = [("jit", True)]
    if launch.despecialization_supported():
        variants.append(("as-tensorrt", False))
    return variants


def run_check(report: Report, kernel: str, dtype: str, shape: Any, variant: str,
               check: Callable[[], str | None]) -> None:
    try:
        problem = check()
    except Exception as err:  # a compile or launch error fails this check, not the run
        problem = f"{type(err).__name__}: {err}\n{traceback.format_exc(limit=3)}"
    report.checks.append(Check(kernel, dtype, str(shape), variant, problem is None,
                               problem or ""))
    if problem is not None:
        print(f"  FAIL {kernel} {dtype} {shape} {variant}: {problem}", flush=True)


def check_skip_layer_norm(shape: tuple[int, ...], dtype: str, device: str,
                          hints: bool) -> str | None:
    tensors = kernel_cases.skip_layer_norm_inputs(shape, dtype, device)
    output, total = triton_launch.skip_layer_norm(**tensors, epsilon=EPSILON,
                                                    alignment_hints=hints)
    want_output, want_total = kernel_cases.skip_layer_norm_expected(tensors, epsilon=EPSILON)
    return mismatch("output", output, want_output, dtype) or mismatch("sum", total,
                                                                       want_total, dtype)


def check_bias_gelu(shape: tuple[int, ...], approximate: str, dtype: str, device: str,
                    hints: bool) -> str | None:
    tensors = kernel_cases.bias_gelu_inputs(shape, dtype, device)
    output = triton_launch.bias_gelu(**tensors, approximate=approximate,
                                       alignment_hints=hints)
    return mismatch(f"approximate={approximate}", output,
                    kernel_cases.bias_gelu_expected(tensors, approximate=approximate), dtype)


def check_attention(case: tuple[Any, ...], dtype: str, device: str,
                    hints: bool) -> str | None:
    label, *sizes = case
    num_heads, head_size = sizes[3], sizes[4]
    scale = 1.0 / math.sqrt(head_size)
    tensors = kernel_cases.attention_inputs(*sizes, dtype=dtype, device=device)
    output = triton_launch.multi_head_attention(**tensors, num_heads=num_heads, scale=scale,
                                                  alignment_hints=hints)
    want = kernel_cases.attention_expected(tensors, num_heads=num_heads, scale=scale)
    return mismatch(label, output, want, dtype,
                    atol=attention_atol(dtype, tensors["value"].float().cpu().numpy()))


def check_correctness(report: Report, device: str, quick: bool) -> None:
    variants = launch_variants(device, triton_launch)
    for dtype in DTYPES:
        for variant, hints in variants:
            few = 2 if quick or not hints else None  # as TensorRT compiles: a subset (time)
            for shape in SKIP_LAYER_NORM_SHAPES[:few]:
                run_check(report, "skip_layer_norm", dtype, shape, variant,
                           partial(check_skip_layer_norm, shape, dtype, device, hints))
            for shape in BIAS_GELU_SHAPES[:few]:
                for approximate in ("none", "tanh"):
                    run_check(report, "bias_gelu", dtype, (*shape, approximate), variant,
                               partial(check_bias_gelu, shape, approximate, dtype, device,
                                                       hints))
            if device == "cpu" and dtype == "bfloat16":
                continue  # the interpreter's tl.dot multiplies bfloat16 bit patterns
            for case in ATTENTION_CASES[:few]:
                run_check(report, "multi_head_attention", dtype, case[0], variant,
                           partial(check_attention, case, dtype, device, hints))
    passed = sum(c.ok for c in report.checks)
    print(f"correctness: {passed}/{len(report.checks)} checks pass ({device}, variants "
          f"{[v for v, _ in variants]})", flush=True)
