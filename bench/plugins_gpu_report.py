"""The results bench/plugins_gpu.py collects (correctness checks, timings) and how it prints them."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["TARGET_COPY_FRACTION", "TARGET_EAGER_SPEEDUP", "Check", "Report", "Timed", "fmt",
           "print_header", "print_row", "summarize"]

TARGET_COPY_FRACTION = 0.70
TARGET_EAGER_SPEEDUP = 1.5


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


def fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def print_header() -> None:
    print(f"{'kernel':<21}{'shape':<20}{'dtype':<9}{'variant':<21}{'time µs':>9}{'GB/s':>8}"
          f"{'copy GB/s':>10}{'% copy':>8}{'eager µs':>9}{'x eager':>8}{'x sdpa':>7}"
          f"{'TFLOP/s':>8}  verdict", flush=True)


def print_row(row: Timed) -> None:
    def us(ms: float | None) -> str:
        return fmt(None if ms is None else ms * 1e3, ".0f")

    fraction = None if row.copy_fraction is None else row.copy_fraction * 100
    print(f"{row.kernel:<21}{row.shape:<20}{row.dtype:<9}{row.variant:<21}{us(row.ms):>9}"
          f"{fmt(row.gbps, '.0f'):>8}{fmt(row.copy_gbps, '.0f'):>10}{fmt(fraction, '.0f'):>8}"
          f"{us(row.eager_ms):>9}{fmt(row.eager_speedup, '.2f'):>8}"
          f"{fmt(row.sdpa_speedup, '.2f'):>7}{fmt(row.tflops, '.0f'):>8}  {row.verdict}"
          f"{'  ' + row.detail if row.detail else ''}", flush=True)


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
                  f"{fmt(None if row.copy_fraction is None else row.copy_fraction * 100, '.0f')}"
                  f"% of copy, {fmt(row.eager_speedup, '.2f')}x eager")
    print(f"done in {report.seconds:.0f} s", flush=True)
