"""A job's benchmark plots, stored as SVG artifacts (kind "plot") beside its engine: how the
per-round latencies of the original and the engine are spread, and how latency and throughput
move with the batch when the job swept it.

Drawn from the records the job is about to write (`benchmark_rows`), with the dashboard's chart
primitives (core/svg_charts.py), so a plot shows exactly the numbers in the records. Labels are
escaped there: variant names come from our code, but nothing in a stored SVG is left to trust.
"""

from __future__ import annotations

from collections.abc import Sequence
from math import ceil

from markupsafe import Markup

from core.db.models import BenchmarkRecord, BenchmarkSuite, BenchmarkVariant
from core.svg_charts import Series, format_number, grouped_bar_chart, line_chart, standalone_svg
from worker.pipeline.results import JobRun, PendingArtifact

__all__ = ["LATENCY_PLOT", "SWEEP_PLOT", "benchmark_plots"]

LATENCY_PLOT = "latency_distribution.svg"
SWEEP_PLOT = "batch_sweep.svg"
PLOT_KIND = "plot"
# the user's choice is between these two; the unoptimized original is in the records
_PLOTTED = (BenchmarkVariant.ORIGINAL, BenchmarkVariant.ENGINE)


def benchmark_plots(run: JobRun, records: Sequence[BenchmarkRecord]) -> tuple[PendingArtifact, ...]:
    """Write the plots `records` allow into the run's scratch folder: the latency distribution
    when there is a comparison, the batch sweep when there are sweep records."""
    plots = []
    comparison = [r for r in records
                  if r.suite == BenchmarkSuite.COMPARISON and r.variant in _PLOTTED]
    if comparison:
        plots.append((LATENCY_PLOT, standalone_svg("Latency per round, original vs engine",
                                                   [latency_distribution(comparison)])))
    sweep = [r for r in records if r.suite == BenchmarkSuite.SWEEP]
    if sweep:
        plots.append((SWEEP_PLOT, standalone_svg("Latency and throughput by batch size",
                                                 batch_sweep(sweep))))
    folder = run.scratch_dir / "plots"
    folder.mkdir(exist_ok=True)
    artifacts = []
    for name, document in plots:
        path = folder / name
        path.write_text(document, encoding="utf-8")
        artifacts.append(PendingArtifact(name, PLOT_KIND, path))
    return tuple(artifacts)


def latency_distribution(records: Sequence[BenchmarkRecord]) -> Markup:
    """A histogram of every variant's per-round latencies on shared bins (one bar per variant
    in each); the p50/p90/p99 of each when a record lacks its rounds."""
    rounds = {r.variant: [float(v) for v in r.latencies_ms or ()] for r in records}
    if all(rounds.values()):
        labels, counts = _shared_bins(list(rounds.values()))
        return grouped_bar_chart(
            "latency-distribution", "Latency per timed round", labels,
            [Series(variant, values) for variant, values in zip(rounds, counts, strict=True)],
            axis_label="rounds")
    return grouped_bar_chart(
        "latency-percentiles", "Latency percentiles (per-round latencies not recorded)",
        ["p50", "p90", "p99"],
        [Series(r.variant, [r.latency_ms_p50, r.latency_ms_p90, r.latency_ms_p99])
         for r in records], unit="ms", axis_label="latency (ms)")


def batch_sweep(records: Sequence[BenchmarkRecord]) -> list[Markup]:
    """Median latency and throughput against the batch size, one line per variant."""
    batches = sorted({r.batch_size for r in records})
    variants = list(dict.fromkeys(r.variant for r in records))
    by = {(r.variant, r.batch_size): r for r in records}

    def series(field: str) -> list[Series]:
        return [Series(v, [getattr(by[v, b], field) if (v, b) in by else None for b in batches])
                for v in variants]

    return [
        line_chart("sweep-latency", "Median latency by batch size", batches,
                   series("latency_ms_p50"), unit="ms", x_label="batch size",
                   axis_label="latency p50 (ms)"),
        line_chart("sweep-throughput", "Throughput by batch size", batches,
                   series("throughput_per_s"), unit="/s", x_label="batch size",
                   axis_label="samples per second"),
    ]


def _shared_bins(samples: Sequence[Sequence[float]]) -> tuple[list[str], list[list[float]]]:
    """Equal-width bins over every sample (about √n of them, 5 to 30): their labels and each
    sample's counts."""
    everything = [v for values in samples for v in values]
    low, high = min(everything), max(everything)
    count = 1 if high == low else min(max(ceil(max(len(v) for v in samples) ** 0.5), 5), 30)
    width = (high - low) / count if high > low else 1.0
    counts = []
    for values in samples:
        bins = [0.0] * count
        for value in values:
            bins[min(int((value - low) / width), count - 1)] += 1
        counts.append(bins)
    labels = [f"{format_number(low + i * width)}–{format_number(low + (i + 1) * width)} ms"
              for i in range(count)]
    return labels, counts
