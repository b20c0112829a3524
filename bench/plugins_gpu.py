"""Check the plugins' Triton kernels against their numpy references and time them on a GPU.

    python -m bench.plugins_gpu [--quick] [--json OUT] [--interpret]

1. Correctness: every kernel (SkipLayerNorm, BiasGelu, MultiHeadAttention) in float32, float16
   and bfloat16, at a few shapes (non-power-of-two sizes, ragged tiles, masks), against its
   numpy reference, launched as TensorRT launches it (optimizer/plugins/triton_launch.py), with
   Triton's JIT alignment hints and, at the first two shapes, without them (as TensorRT's AOT
   build compiles it).
   Tolerances are tests/gpu/support.py's. Any failure makes the exit status 1.
2. Speed (CUDA only), CUDA events, median of --reps after warm-up, L2 flushed before each run:
   - SkipLayerNorm at 65536 x 1024 and BiasGelu at 65536 x 1024 and 65536 x 4096 (BERT-large's
     hidden and feed-forward sizes): effective bandwidth (the bytes the op must read and write
     / time) against torch's device-to-device copy of as many bytes, measured in the same run,
     and the speed-up over the eager PyTorch composition (x + skip + bias then F.layer_norm;
     the bias add then F.gelu). Targets: >= 70% of the copy's bandwidth and >= 1.5x eager.
   - MultiHeadAttention at batch 32 x 16 heads x head 64, sequence 128 and 512, with a key
     padding mask: TFLOP/s and the speed-up over eager attention (softmax(q kᵀ * scale + bias)
     v with the head split and merge) and over F.scaled_dot_product_attention. No target.
   The outputs at these sizes are also checked against the eager result computed in float32.
Prints a table with PASS/FAIL per target; --json writes everything (rewritten after each part,
so a run cut short still leaves its results). Without CUDA it says so and exits 0; with
--interpret it runs part 1 on the CPU through Triton's interpreter instead (small sizes,
bfloat16 attention excluded: the interpreter cannot multiply bfloat16).

Needs numpy, torch and triton only (not this project's dependencies): run from the repository
root, with PYTHONPATH=. where the project is not installed.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import statistics
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tests.gpu import cases
from tests.gpu.support import DTYPES, attention_atol, mismatch, tolerance, triton_launch

TARGET_COPY_FRACTION = 0.70
TARGET_EAGER_SPEEDUP = 1.5
EPSILON = 1e-5
L2_FLUSH_BYTES = 256 * 2**20  # well above an H100/H200's 50 MiB L2

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

# Speed sizes.
SKIP_LAYER_NORM_SIZE = (65536, 1024)
BIAS_GELU_SIZES = [(65536, 1024), (65536, 4096)]
ATTENTION_SIZES = [(32, 16, 128, 64), (32, 16, 512, 64)]  # batch, heads, sequence, head size


@dataclass
class Check:
    """One correctness check: a kernel, dtype, shape and launch variant against the reference."""

    kernel: str
    dtype: str
    shape: str
    variant: str
    ok: bool
    detail: str = ""


@dataclass
class Timed:
    """One speed measurement and the baselines it is compared with (times in milliseconds)."""

    kernel: str
    shape: str
    dtype: str
    variant: str
    ms: float | None = None
    bytes: int | None = None
    gbps: float | None = None
    copy_gbps: float | None = None
    copy_fraction: float | None = None
    eager_ms: float | None = None
    eager_speedup: float | None = None
    sdpa_ms: float | None = None
    sdpa_speedup: float | None = None
    tflops: float | None = None
    verdict: str = "info"
    detail: str = ""


@dataclass
class Report:
    environment: dict[str, Any] = field(default_factory=dict)
    checks: list[Check] = field(default_factory=list)
    timings: list[Timed] = field(default_factory=list)
    copies: dict[str, float] = field(default_factory=dict)  # bytes moved -> GB/s
    seconds: float = 0.0

    def write(self, path: Path | None) -> None:
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(asdict(self), indent=2, default=str))

    @property
    def failed_checks(self) -> list[Check]:
        return [c for c in self.checks if not c.ok]


# --- part 1: correctness ---------------------------------------------------------------------

def _variants(device: str, launch: Any) -> list[tuple[str, bool]]:
    """(name, alignment_hints) to check: the interpreter ignores hints, so only one there."""
    if device == "cpu":
        return [("interpreter", True)]
    variants = [("jit", True)]
    if launch.despecialization_supported():
        variants.append(("as-tensorrt", False))
    return variants


def _run_check(report: Report, kernel: str, dtype: str, shape: Any, variant: str,
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
    tensors = cases.skip_layer_norm_inputs(shape, dtype, device)
    output, total = triton_launch().skip_layer_norm(**tensors, epsilon=EPSILON,
                                                    alignment_hints=hints)
    want_output, want_total = cases.skip_layer_norm_expected(tensors, epsilon=EPSILON)
    return mismatch("output", output, want_output, dtype) or mismatch("sum", total,
                                                                       want_total, dtype)


def check_bias_gelu(shape: tuple[int, ...], approximate: str, dtype: str, device: str,
                    hints: bool) -> str | None:
    tensors = cases.bias_gelu_inputs(shape, dtype, device)
    output = triton_launch().bias_gelu(**tensors, approximate=approximate,
                                       alignment_hints=hints)
    return mismatch(f"approximate={approximate}", output,
                    cases.bias_gelu_expected(tensors, approximate=approximate), dtype)


def check_attention(case: tuple[Any, ...], dtype: str, device: str,
                    hints: bool) -> str | None:
    label, *sizes = case
    num_heads, head_size = sizes[3], sizes[4]
    scale = 1.0 / math.sqrt(head_size)
    tensors = cases.attention_inputs(*sizes, dtype=dtype, device=device)
    output = triton_launch().multi_head_attention(**tensors, num_heads=num_heads, scale=scale,
                                                  alignment_hints=hints)
    want = cases.attention_expected(tensors, num_heads=num_heads, scale=scale)
    return mismatch(label, output, want, dtype,
                    atol=attention_atol(dtype, tensors["value"].float().cpu().numpy()))


def check_correctness(report: Report, device: str, quick: bool) -> None:
    variants = _variants(device, triton_launch())
    for dtype in DTYPES:
        for variant, hints in variants:
            few = 2 if quick or not hints else None  # as TensorRT compiles: a subset (time)
            for shape in SKIP_LAYER_NORM_SHAPES[:few]:
                _run_check(report, "skip_layer_norm", dtype, shape, variant,
                           lambda: check_skip_layer_norm(shape, dtype, device, hints))
            for shape in BIAS_GELU_SHAPES[:few]:
                for approximate in ("none", "tanh"):
                    _run_check(report, "bias_gelu", dtype, (*shape, approximate), variant,
                               lambda: check_bias_gelu(shape, approximate, dtype, device,
                                                       hints))
            if device == "cpu" and dtype == "bfloat16":
                continue  # the interpreter's tl.dot multiplies bfloat16 bit patterns
            for case in ATTENTION_CASES[:few]:
                _run_check(report, "multi_head_attention", dtype, case[0], variant,
                           lambda: check_attention(case, dtype, device, hints))
    passed = sum(c.ok for c in report.checks)
    print(f"correctness: {passed}/{len(report.checks)} checks pass ({device}, variants "
          f"{[v for v, _ in variants]})", flush=True)


# --- part 2: speed ---------------------------------------------------------------------------

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
    _print_row(row)


def time_skip_layer_norm(report: Report, dtype: str, *, warmup: int, reps: int) -> None:
    import torch
    import torch.nn.functional as F

    launch = triton_launch()
    rows, hidden = SKIP_LAYER_NORM_SIZE
    t = cases.skip_layer_norm_inputs(SKIP_LAYER_NORM_SIZE, dtype, "cuda")
    element = t["input"].element_size()

    def eager() -> Any:
        return F.layer_norm(t["input"] + t["skip"] + t["bias"], (hidden,), t["gamma"],
                            t["beta"], EPSILON)

    reference = F.layer_norm(t["input"].float() + t["skip"].float() + t["bias"].float(),
                             (hidden,), t["gamma"].float(), t["beta"].float(), EPSILON)
    eager_ms = _eager_ms(eager, warmup=warmup, reps=reps)
    for variant, hints in _variants("cuda", launch):
        for store_sum in (True, False):
            def run(hints: bool = hints, store_sum: bool = store_sum) -> Any:
                return launch.skip_layer_norm(**t, epsilon=EPSILON, store_sum=store_sum,
                                              alignment_hints=hints)
            name = f"{variant}{'' if store_sum else ', no sum'}"
            _run_check(report, "skip_layer_norm", dtype, SKIP_LAYER_NORM_SIZE, name,
                       lambda: _gpu_mismatch("output", run()[0], reference, dtype))
            # input, skip read; output (and the sum) written; gamma, beta, bias read once
            moved = ((2 + 1 + store_sum) * rows + 3) * hidden * element
            _memory_row(report, "skip_layer_norm", SKIP_LAYER_NORM_SIZE, dtype, name, moved,
                        run, eager_ms, warmup=warmup, reps=reps)
    del t, reference
    torch.cuda.empty_cache()


def time_bias_gelu(report: Report, dtype: str, size: tuple[int, int], approximate: str, *,
                   warmup: int, reps: int) -> None:
    import torch
    import torch.nn.functional as F

    launch = triton_launch()
    t = cases.bias_gelu_inputs(size, dtype, "cuda")
    moved = (2 * size[0] + 1) * size[1] * t["input"].element_size()

    def eager() -> Any:
        return F.gelu(t["input"] + t["bias"], approximate=approximate)

    reference = F.gelu(t["input"].float() + t["bias"].float(), approximate=approximate)
    eager_ms = _eager_ms(eager, warmup=warmup, reps=reps)
    for variant, hints in _variants("cuda", launch):
        def run(hints: bool = hints) -> Any:
            return launch.bias_gelu(**t, approximate=approximate, alignment_hints=hints)
        _run_check(report, "bias_gelu", dtype, (*size, approximate), variant,
                   lambda: _gpu_mismatch("output", run(), reference, dtype))
        _memory_row(report, "bias_gelu", (*size, approximate), dtype, variant, moved, run,
                    eager_ms, warmup=warmup, reps=reps)
    del t, reference
    torch.cuda.empty_cache()


def time_attention(report: Report, dtype: str, size: tuple[int, int, int, int], *,
                   warmup: int, reps: int) -> None:
    import torch
    import torch.nn.functional as F

    launch = triton_launch()
    batch, heads, seq, head = size
    t = cases.attention_inputs(batch, seq, seq, heads, head, head, "key_padding",
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
    for variant, hints in _variants("cuda", launch):
        def run(hints: bool = hints) -> Any:
            return launch.multi_head_attention(**t, num_heads=heads, scale=scale,
                                               alignment_hints=hints)
        _run_check(report, "multi_head_attention", dtype, size, variant,
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
        _print_row(row)
    del t, reference
    torch.cuda.empty_cache()


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _print_header() -> None:
    print(f"{'kernel':<21}{'shape':<20}{'dtype':<9}{'variant':<21}{'time µs':>9}{'GB/s':>8}"
          f"{'copy GB/s':>10}{'% copy':>8}{'eager µs':>9}{'x eager':>8}{'x sdpa':>7}"
          f"{'TFLOP/s':>8}  verdict", flush=True)


def _print_row(row: Timed) -> None:
    def us(ms: float | None) -> str:
        return _fmt(None if ms is None else ms * 1e3, ".0f")

    fraction = None if row.copy_fraction is None else row.copy_fraction * 100
    print(f"{row.kernel:<21}{row.shape:<20}{row.dtype:<9}{row.variant:<21}{us(row.ms):>9}"
          f"{_fmt(row.gbps, '.0f'):>8}{_fmt(row.copy_gbps, '.0f'):>10}{_fmt(fraction, '.0f'):>8}"
          f"{us(row.eager_ms):>9}{_fmt(row.eager_speedup, '.2f'):>8}"
          f"{_fmt(row.sdpa_speedup, '.2f'):>7}{_fmt(row.tflops, '.0f'):>8}  {row.verdict}"
          f"{'  ' + row.detail if row.detail else ''}", flush=True)


def measure_speed(report: Report, *, quick: bool, reps: int, warmup: int,
                  json_path: Path | None) -> None:
    dtypes = ["float16"] if quick else ["float16", "bfloat16", "float32"]
    print(f"\nspeed (median of {reps}, L2 flushed; targets: >= {TARGET_COPY_FRACTION:.0%} of "
          f"copy bandwidth and >= {TARGET_EAGER_SPEEDUP}x eager)", flush=True)
    _print_header()
    for dtype in dtypes:
        time_skip_layer_norm(report, dtype, warmup=warmup, reps=reps)
        report.write(json_path)
    for dtype in dtypes:
        for size in BIAS_GELU_SIZES:
            for approximate in ("none",) if quick or dtype != "float16" else ("none", "tanh"):
                time_bias_gelu(report, dtype, size, approximate, warmup=warmup, reps=reps)
        report.write(json_path)
    for dtype in ["float16"] if quick else ["float16", "bfloat16"]:
        for size in ATTENTION_SIZES:
            time_attention(report, dtype, size, warmup=warmup, reps=reps)
        report.write(json_path)


# --- driver ----------------------------------------------------------------------------------

def environment(device: str) -> dict[str, Any]:
    import numpy
    import torch
    import triton

    found: dict[str, Any] = {"device": device, "python": platform.python_version(),
                             "numpy": numpy.__version__, "torch": torch.__version__,
                             "triton": triton.__version__, "cuda": torch.version.cuda}
    if device == "cuda":
        properties = torch.cuda.get_device_properties(0)
        found.update(gpu=properties.name, capability=list(torch.cuda.get_device_capability(0)),
                     memory_gib=round(properties.total_memory / 2**30, 1))
    return found


def summarize(report: Report) -> None:
    failed = report.failed_checks
    print(f"\ncorrectness: {len(report.checks) - len(failed)}/{len(report.checks)} pass"
          + "".join(f"\n  FAIL {c.kernel} {c.dtype} {c.shape} {c.variant}: {c.detail}"
                    for c in failed))
    targeted = [r for r in report.timings if r.verdict in ("PASS", "FAIL", "ERROR")]
    if targeted:
        print(f"targets (>= {TARGET_COPY_FRACTION:.0%} copy bandwidth, >= "
              f"{TARGET_EAGER_SPEEDUP}x eager):")
        for row in targeted:
            print(f"  {row.verdict:<5} {row.kernel} {row.shape} {row.dtype} {row.variant}: "
                  f"{_fmt(None if row.copy_fraction is None else row.copy_fraction * 100, '.0f')}"
                  f"% of copy, {_fmt(row.eager_speedup, '.2f')}x eager")
    print(f"done in {report.seconds:.0f} s", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true",
                        help="fewer correctness shapes; speed in float16 only, fewer runs")
    parser.add_argument("--json", type=Path, help="write the results to this file")
    parser.add_argument("--interpret", action="store_true",
                        help="without CUDA: the correctness checks on the CPU, through "
                             "Triton's interpreter")
    parser.add_argument("--reps", type=int, help="timed runs per measurement (default 30, "
                        "10 with --quick)")
    args = parser.parse_args(argv)
    started = time.monotonic()
    launch = triton_launch()
    if args.interpret:
        launch.enable_interpreter()  # before anything imports triton for compilation
    import torch

    report = Report()
    if args.interpret and torch.cuda.is_available():
        print("--interpret runs the kernels on the CPU even though CUDA is available",
              flush=True)
    if not args.interpret and not torch.cuda.is_available():
        print("no CUDA device here: nothing to check or time (--interpret runs the "
              "correctness checks on the CPU through Triton's interpreter)")
        report.environment = {"device": None, "python": platform.python_version(),
                              "torch": torch.__version__}
        report.write(args.json)
        return 0
    device = "cpu" if args.interpret else "cuda"
    report.environment = environment(device)
    print(json.dumps(report.environment), flush=True)
    check_correctness(report, device, args.quick)
    report.seconds = time.monotonic() - started
    report.write(args.json)
    if device == "cuda":
        reps = args.reps or (10 if args.quick else 30)
        measure_speed(report, quick=args.quick, reps=reps, warmup=3, json_path=args.json)
    report.seconds = time.monotonic() - started
    report.write(args.json)
    summarize(report)
    return 1 if report.failed_checks else 0


if __name__ == "__main__":
    sys.exit(main())
