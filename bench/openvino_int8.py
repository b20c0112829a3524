"""int8 on OpenVINO: what FuseForge's accuracy-budget search ships, against NNCF by hand (issue 46).

For each model and thread count, the int8 search (optimizer/quantization/search.py) runs as an
int8 job on backend openvino runs it: NNCF's flavour (QuantFlavour.OPENVINO_NNCF) calibrated on
the calibration samples, judged on the validation samples against the original by the int8
budget (default_tolerances("int8")), nodes kept in float one at a time while out of budget,
candidates timed in OpenVINO at f32 and the job's threads against the fp32 graph there; its wall
time is printed. Then, interleaved in this one process (optimizer/measure/interleaved.py), at
that thread count:

  ort original      the model at ONNX Runtime ORT_ENABLE_ALL (the yardstick)
  ov f32            the fp32 graph the search started from, OpenVINO at f32 (what int8 must beat)
  fuseforge int8    what the search shipped (its int8 model, else that fp32 graph), OpenVINO at
                    f32 as the engine runs it
  nncf by hand      `nncf.quantize` with its defaults on the original model as OpenVINO reads it
                    and the same calibration samples, compiled with OpenVINO's defaults (bf16 for the float
                    remainder on a CPU with AVX512_BF16 or AMX): what a user gets by hand

Accuracy: each variant's worst output cosine against the original's outputs (each output over
all samples as one vector) on held-apart inputs, neither calibration nor validation samples.

Models: ResNet-50 built in code (optimizer.testing.real_models.resnet50, random weights and
norm statistics; standard-normal images, optimizer.testing.quantization_models.
calibration_images) and PP-OCR recognizers from bench/openvino_baseline.py's MODELS (synthetic
text lines, its text images).

    .venv/bin/python -m bench.openvino_int8 [--models resnet50,ppocr-rec-v5] [--threads 1,2]
        [--calibration-samples 16] [--validation-samples 4] [--samples 4] [--rounds 9]
        [--graph fused|original] [--out bench-results/openvino_int8.md]

The machine is shared and noisy: compare ratios from one run, never absolute times across runs.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

from bench.openvino_baseline import MODELS, fixed_model, ort_run, output_accuracy, text_images
from optimizer.measure.interleaved import LatencyRatio, interleaved_call_ratios
from optimizer.optimize import OptimizeOptions, optimize_model
from optimizer.precision import run_outputs
from optimizer.quantization.calibration import CalibrationTable
from optimizer.quantization.qdq_opset import at_qdq_opset
from optimizer.quantization.search import (
    QuantizationRequest,
    QuantizationResult,
    quantize_within_budget,
)
from optimizer.registries.backends import BACKENDS, Backend
from optimizer.registries.precisions import Precision
from optimizer.registries.quantization import CalibrationMethod, QuantizationMode
from optimizer.testing.quantization_models import calibration_images
from optimizer.testing.real_models import resnet50
from optimizer.validation.tolerances import default_tolerances

__all__ = ["main"]

Feed = dict[str, np.ndarray]
CALIBRATION_SEED, VALIDATION_SEED, HELD_APART_SEED, TIMING_SEED = 11, 12, 13, 14
RECOGNIZERS = {name: (spec, shape) for name, spec, shape in MODELS if "-rec-" in name}


@dataclass
class Row:
    model: str
    threads: int
    search_s: float
    result: QuantizationResult
    cosine: dict[str, float] = field(default_factory=dict)
    ratios: dict[str, LatencyRatio] = field(default_factory=dict)


def _model(name: str, cache: Path, work: Path) -> tuple[Path, onnx.ModelProto,
                                                        Callable[[int, int], list[Feed]]]:
    """The model's file, and its inputs by (count, seed)."""
    if name == "resnet50":
        model = resnet50(batch=1)
        path = work / "resnet50.onnx"
        onnx.save(model, path)
        return path, model, lambda count, seed: [
            {"input": x} for x in calibration_images(model, count, seed=seed)]
    spec, shape = RECOGNIZERS[name]
    path, model = fixed_model(name, spec, shape, cache, work)
    input_name = model.graph.input[0].name
    return path, model, lambda count, seed: text_images(input_name, shape, count, seed)


def _search(graph: onnx.ModelProto, model: onnx.ModelProto, calibration: list[Feed],
            validation: list[Feed], threads: int) -> tuple[QuantizationResult, float]:
    spec = BACKENDS[Backend.OPENVINO]
    started = time.monotonic()
    result = quantize_within_budget(
        graph, request=QuantizationRequest(
            mode=QuantizationMode.STATIC, flavours=spec.quant_flavours[Precision.INT8],
            candidate_runner=spec.candidate_runner, threads=threads, allow_dynamic=False),
        tolerances=default_tolerances("int8"), validation_feeds=validation,
        reference=run_outputs(model, validation), calibration_feeds=calibration,
        tables=_no_table,
        progress=lambda step: print(f"    {step}", file=sys.stderr, flush=True))
    return result, time.monotonic() - started


def _no_table(method: CalibrationMethod, graph: onnx.ModelProto) -> CalibrationTable:
    raise AssertionError("NNCF's flavour calibrates itself: the search asks for no table")


def _measure(name: str, path: Path, model: onnx.ModelProto,
             feeds: Callable[[int, int], list[Feed]], threads: Sequence[int],
             args: argparse.Namespace, work: Path) -> list[Row]:
    import nncf  # noqa: PLC0415  # the optional extra
    import openvino as ov  # noqa: PLC0415

    calibration = feeds(args.calibration_samples, CALIBRATION_SEED)
    validation = feeds(args.validation_samples, VALIDATION_SEED)
    held_apart = feeds(args.samples, HELD_APART_SEED)
    [timing] = feeds(1, TIMING_SEED)
    fused = (optimize_model(model, OptimizeOptions(for_quantization=True))[0]
             if args.graph == "fused" else model)
    graph, _ = at_qdq_opset(fused)
    fp32_path = work / f"{name}.fp32.onnx"
    onnx.save(graph, fp32_path)
    print(f"  {name}: NNCF by hand ...", file=sys.stderr, flush=True)
    core = ov.Core()
    by_hand = nncf.quantize(core.read_model(str(path)), nncf.Dataset(calibration),
                            subset_size=len(calibration))
    names = [o.name for o in model.graph.output]
    reference = run_outputs(model, held_apart)
    want = [np.stack([outputs[n] for outputs in reference]) for n in names]
    rows = []
    for count in threads:
        print(f"  {name}: int8 search at {count} thread(s) ...", file=sys.stderr, flush=True)
        result, seconds = _search(graph, model, calibration, validation, count)
        print(f"  {name}: {result.shipped}: {result.why} ({seconds:.0f} s)", file=sys.stderr)
        shipped_path = fp32_path
        if result.model is not None:
            shipped_path = work / f"{name}.int8.{count}.onnx"
            onnx.save(result.model, shipped_path)
        row = Row(name, count, seconds, result)
        base = {"PERFORMANCE_HINT": "LATENCY", "INFERENCE_NUM_THREADS": count}
        compiled = {
            "ov f32": core.compile_model(str(fp32_path), "CPU",
                                         {**base, "INFERENCE_PRECISION_HINT": "f32"}),
            "fuseforge int8": core.compile_model(str(shipped_path), "CPU",
                                                 {**base, "INFERENCE_PRECISION_HINT": "f32"}),
            "nncf by hand": core.compile_model(by_hand, "CPU", base)}
        runs = [ort_run(path, dict(timing), count)[0]]
        for label, model_compiled in compiled.items():
            request = model_compiled.create_infer_request()
            outputs = [request.infer(dict(feed)) for feed in held_apart]
            got = [np.stack([np.asarray(out[model_compiled.output(n)]) for out in outputs])
                   for n in names]
            row.cosine[label], _ = output_accuracy(got, want)
            runs.append(partial(request.infer, dict(timing)))
        print(f"  {name}: timing at {count} thread(s) ...", file=sys.stderr, flush=True)
        ratios = interleaved_call_ratios(runs, rounds=args.rounds)
        row.ratios = dict(zip(["ort original", *compiled], ratios, strict=True))
        rows.append(row)
    return rows


def _table(rows: Sequence[Row]) -> list[str]:
    labels = ("ov f32", "fuseforge int8", "nncf by hand")
    head = ["model", "threads", "search s", "shipped (kept in float)", "ort original ms",
            *(f"{label}: ratio [95% CI], cosine" for label in labels)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        shipped = f"{row.result.shipped} ({len(row.result.kept_nodes)})"
        cells = [row.model, str(row.threads), f"{row.search_s:.0f}", shipped,
                 f"{row.ratios['ort original'].median_ms:.2f}"]
        for label in labels:
            r = row.ratios[label]
            cells.append(f"{r.ratio:.3f} [{r.ratio_low:.3f}, {r.ratio_high:.3f}], "
                         f"{row.cosine[label]:.4f}")
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    known = ["resnet50", *RECOGNIZERS]
    parser.add_argument("--models", default="resnet50,ppocr-rec-v5")
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--calibration-samples", type=int, default=16)
    parser.add_argument("--validation-samples", type=int, default=4)
    parser.add_argument("--samples", type=int, default=4, help="held-apart accuracy inputs")
    parser.add_argument("--rounds", type=int, default=9, help="interleaved timing rounds")
    parser.add_argument("--graph", choices=("fused", "original"), default="fused",
                        help="the graph the search quantizes: FuseForge's fused one for int8, "
                             "or the original")
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "fuseforge")
    parser.add_argument("--out", type=Path, default=None, help="also write the table here")
    args = parser.parse_args(argv)
    names = [n for n in args.models.split(",") if n]
    unknown = [n for n in names if n not in known]
    if unknown:
        parser.error(f"unknown model(s) {', '.join(unknown)}; choose from {', '.join(known)}")
    threads = [int(t) for t in args.threads.split(",")]
    ort.set_default_logger_severity(3)
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="fuseforge-bench-openvino-int8-") as tmp:
        for name in names:
            path, model, feeds = _model(name, args.cache.expanduser(), Path(tmp))
            rows += _measure(name, path, model, feeds, threads, args, Path(tmp))
    lines = [f"ratio = time / the original at ORT ENABLE_ALL (median of {args.rounds} "
             f"interleaved rounds, bootstrap 95% interval); cosine: worst output, "
             f"{args.samples} held-apart inputs; NNCF calibrated on {args.calibration_samples} "
             f"samples, the search judged on {args.validation_samples}; graph: {args.graph}",
             "", *_table(rows), ""]
    for row in rows:
        kept = ", ".join(f"{node.name} {node.worst_cosine_after:.4f}"
                         for node in row.result.kept_nodes)
        lines.append(f"- {row.model} @ {row.threads}t: {row.result.why}"
                     + (f"; kept in float (worst cosine after each): {kept}" if kept else ""))
    text = "\n".join(lines)
    print(text)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
