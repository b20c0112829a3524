"""Part 2 of bench/plugins_gpu.py (CUDA only): bandwidth and speed-ups of the kernels."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.plugins_gpu_checks import EPSILON, launch_variants, run_check
from bench.plugins_gpu_report import (
    TARGET_COPY_FRACTION,
    TARGET_EAGER_SPEEDUP,
    Report,
    Timed,
    print_header,
    print_row,
)
from optimizer.testing import kernel_cases, triton_launch
from optimizer.testing.kernel_checks import attention_atol, tolerance

__all__ = ["measure_speed", "time_ms"]

L2_FLUSH_BYTES = 256 * 2**20  # well above an H100/H200's 50 MiB L2

# Speed sizes.
SKIP_LAYER_NORM_SIZE = (65536, 1024)
BIAS_GELU_SIZES = [(65536, 1024), (65536, 4096)]
ATTENTION_SIZES = [(32, 16, 128, 64), (32, 16, 512, 64)]  # batch, heads, sequence, head size


def time_ms(fn: Callable[[], Any], *, warmup: int, reps: int) -> float:
    """Median GPU time of fn() in milliseconds, L2 flushed before each timed call.

    The flush (a 256 MiB memset) is queued before each start event, so the GPU is busy while
    the CPU queues the next launch: the events time the kernels, not Python's launch overhead.
    """
    import torch

    flush = torch.empty(L2_FLUSH_BYTES, dtype=torch.int8, device="cuda")
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
              for _ in range(reps)]
    for start, end in events:
        flush.zero_()
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    return statistics.median(start.elapsed_time(end) for start, end in events)


def copy_gbps(report: Report, moved: int, *, warmup: int, reps: int) -> float:
    """Device-to-device copy bandwidth when `moved` bytes are read + written (cached)."""
    import torch

    key = str(moved)
    if key not in report.copies:
        src = torch.empty(moved // 2, dtype=torch.uint8, device="cuda").random_(0, 255)
        dst = torch.empty_like(src)
        ms = time_ms(lambda: dst.copy_(src), warmup=warmup, reps=reps)
        report.copies[key] = moved / ms / 1e6
        del src, dst
    return report.copies[key]


def _gpu_mismatch(what: str, output: Any, expected: Any, dtype: str, *,
                  atol: float | None = None) -> str | None:
    """mismatch() computed on the GPU (the sizes here are too large for numpy to be quick)."""
    import torch

    rtol, default_atol = tolerance(dtype, "cuda")
    atol = default_atol if atol is None else atol
    actual = output.float()
    nan_differs = torch.isnan(actual) != torch.isnan(expected)
    if bool(nan_differs.any()):
        return f"{what}: NaN in one of kernel and eager float32 only"
    excess = torch.nan_to_num((actual - expected).abs() - rtol * expected.abs(), nan=0.0)
    worst = float(excess.max())
    if worst <= atol:
        return None
    return f"{what}: exceeds atol {atol:.3g} + rtol {rtol:.3g} * |eager float32| by {worst:.3g}"


def _eager_ms(run: Callable[[], Any], *, warmup: int, reps: int) -> float | None:
    try:
        return time_ms(run, warmup=warmup, reps=reps)
    except Exception as err:  # report the kernel's figures even if the baseline fails
        print(f"  eager baseline failed: {type(err).__name__}: {err}", flush=True)
        return None


def _memory_row(report: Report, kernel: str, shape: Any, dtype: str, variant: str,
                moved: int, run: Callable[[], Any], eager_ms: float | None, *,
                warmup: int, reps: int) -> None:
    """Time a memory-bound kernel; record bandwidth, copy fraction, speed-up and verdict."""
    row = Timed(kernel, "x".join(map(str, shape)), dtype, variant, bytes=moved,
                eager_ms=eager_ms)
    try:
        row.ms = time_ms(run, warmup=warmup, reps=reps)
        row.gbps = moved / row.ms / 1e6
        row.copy_gbps = copy_gbps(report, moved, warmup=warmup, reps=reps)
        row.copy_fraction = row.gbps / row.copy_gbps
        row.eager_speedup = None if eager_ms is None else eager_ms / row.ms
        meets = (row.copy_fraction >= TARGET_COPY_FRACTION
                 and (row.eager_speedup or 0.0) >= TARGET_EAGER_SPEEDUP)
        row.verdict = "PASS" if meets else "FAIL"
    except Exception as err:
        row.verdict, row.detail = "ERROR", f"{type(err).__name__}: {err}"
    report.timings.append(row)
    print_row(row)


def time_skip_layer_norm(report: Report, dtype: str, *, warmup: int, reps: int) -> None:
    import torch.nn.functional as F

    launch = triton_launch
    rows, hidden = SKIP_LAYER_NORM_SIZE
    t = kernel_cases.skip_layer_norm_inputs(SKIP_LAYER_NORM_SIZE, dtype, "cuda")
    element = t["input"].element_size()

    def eager() -> Any:
        return F.layer_norm(t["input"] + t["skip"] + t["bias"], (hidden,), t["gamma"],
                            t["beta"], EPSILON)

    reference = F.layer_norm(t["input"].float() + t["skip"].float() + t["bias"].float(),
                             (hidden,), t["gamma"].float(), t["beta"].float(), EPSILON)
    eager_ms = _eager_ms(eager, warmup=warmup, reps=reps)
    for variant, hints in launch_variants("cuda", launch):
        for store_sum in (True, False):
            def run(hints: bool = hints, store_sum: bool = store_sum) -> Any:
                return launch.skip_layer_norm(**t, epsilon=EPSILON, store_sum=store_sum,
                                              alignment_hints=hints)
            name = f"{variant}{'' if store_sum else ', no sum'}"
            run_check(report, "skip_layer_norm", dtype, SKIP_LAYER_NORM_SIZE, name,
                       lambda: _gpu_mismatch("output", run()[0], reference, dtype))
            # input, skip read; output (and the sum) written; gamma, beta, bias read once
            moved = ((2 + 1 + store_sum) * rows + 3) * hidden * element
            _memory_row(report, "skip_layer_norm", SKIP_LAYER_NORM_SIZE, dtype, name, moved,
                        run, eager_ms, warmup=warmup, reps=reps)


def time_bias_gelu(report: Report, dtype: str, size: tuple[int, int], approximate: str, *,
                   warmup: int, reps: int) -> None:
    import torch.nn.functional as F

    launch = triton_launch
    t = kernel_cases.bias_gelu_inputs(size, dtype, "cuda")
    moved = (2 * size[0] + 1) * size[1] * t["input"].element_size()

    def eager() -> Any:
        return F.gelu(t["input"] + t["bias"], approximate=approximate)

    reference = F.gelu(t["input"].float() + t["bias"].float(), approximate=approximate)
    eager_ms = _eager_ms(eager, warmup=warmup, reps=reps)
    for variant, hints in launch_variants("cuda", launch):
        def run(hints: bool = hints) -> Any:
            return launch.bias_gelu(**t, approximate=approximate, alignment_hints=hints)
        run_check(report, "bias_gelu", dtype, (*size, approximate), variant,
                   lambda: _gpu_mismatch("output", run(), reference, dtype))
        _memory_row(report, "bias_gelu", (*size, approximate), dtype, variant, moved, run,
                    eager_ms, warmup=warmup, reps=reps)


def time_attention(report: Report, dtype: str, size: tuple[int, int, int, int], *,
                   warmup: int, reps: int) -> None:
    import torch
    import torch.nn.functional as F

    launch = triton_launch
    batch, heads, seq, head = size
    t = kernel_cases.attention_inputs(batch, seq, seq, heads, head, head, "key_padding",
                               dtype=dtype, device="cuda")
    scale = 1.0 / math.sqrt(head)

    def split(x: Any) -> Any:
        return x.view(batch, seq, heads, head).transpose(1, 2)

    def eager(float32: bool = False) -> Any:
        q, k, v, bias = (t[n].float() if float32 else t[n]
                         for n in ("query", "key", "value", "attention_bias"))
        weights = torch.softmax(split(q) @ split(k).transpose(-1, -2) * scale + bias, dim=-1)
        return (weights @ split(v)).transpose(1, 2).reshape(batch, seq, heads * head)

    def sdpa() -> Any:
        out = F.scaled_dot_product_attention(split(t["query"]), split(t["key"]),
                                             split(t["value"]), attn_mask=t["attention_bias"],
                                             scale=scale)
        return out.transpose(1, 2).reshape(batch, seq, heads * head)

    reference = eager(float32=True)
    atol = attention_atol(dtype, t["value"].float().cpu().numpy())
    flops = 4 * batch * heads * seq * seq * head
    eager_ms = _eager_ms(eager, warmup=warmup, reps=reps)
    sdpa_ms = _eager_ms(sdpa, warmup=warmup, reps=reps)
    for variant, hints in launch_variants("cuda", launch):
        def run(hints: bool = hints) -> Any:
            return launch.multi_head_attention(**t, num_heads=heads, scale=scale,
                                               alignment_hints=hints)
        run_check(report, "multi_head_attention", dtype, size, variant,
                   lambda: _gpu_mismatch("output", run(), reference, dtype, atol=atol))
        row = Timed("multi_head_attention", "x".join(map(str, size)), dtype, variant,
                    eager_ms=eager_ms, sdpa_ms=sdpa_ms)
        try:
            row.ms = time_ms(run, warmup=warmup, reps=reps)
            row.eager_speedup = None if eager_ms is None else eager_ms / row.ms
            row.sdpa_speedup = None if sdpa_ms is None else sdpa_ms / row.ms
            row.tflops = flops / row.ms / 1e9
        except Exception as err:
            row.verdict, row.detail = "ERROR", f"{type(err).__name__}: {err}"
        report.timings.append(row)
        print_row(row)


def measure_speed(report: Report, *, quick: bool, reps: int, warmup: int,
                  json_path: Path | None) -> None:
    dtypes = ["float16"] if quick else ["float16", "bfloat16", "float32"]
    print(f"\nspeed (median of {reps}, L2 flushed; targets: >= {TARGET_COPY_FRACTION:.0%} of "
          f"copy bandwidth and >= {TARGET_EAGER_SPEEDUP}x eager)", flush=True)
    print_header()
    # Each timing's tensors die when it returns; the cache is emptied before the next one.
    for dtype in dtypes:
        time_skip_layer_norm(report, dtype, warmup=warmup, reps=reps)
        _release_gpu_memory()
        report.write(json_path)
    for dtype in dtypes:
        for size in BIAS_GELU_SIZES:
            for approximate in ("none",) if quick or dtype != "float16" else ("none", "tanh"):
                time_bias_gelu(report, dtype, size, approximate, warmup=warmup, reps=reps)
                _release_gpu_memory()
        report.write(json_path)
    for dtype in ["float16"] if quick else ["float16", "bfloat16"]:
        for size in ATTENTION_SIZES:
            time_attention(report, dtype, size, warmup=warmup, reps=reps)
            _release_gpu_memory()
        report.write(json_path)


def _release_gpu_memory() -> None:
    import torch

    torch.cuda.empty_cache()
