"""What float16/bfloat16 conversion keeps, costs and loses on ResNet-50 and a BERT-style encoder.

For each model (optimizer.testing.real_models, random weights, batch 1) and each precision, the
model is converted with the default keep-list (and, with --no-keep, also without one) and the
converted model is evaluated against the float32 original on seeded random inputs through the
CPU emulation (optimizer/precision/emulate.py; no GPU here). Printed per row:

  nodes      nodes in the original graph
  low        nodes the conversion runs in the low type
  kept       nodes with float32 values it keeps in float32 (the reasons are listed below the table)
  casts      Casts it inserted
  convert s  wall time of convert_precision
  cosine     worst cosine similarity over the outputs (all samples together)
  max abs    largest absolute error; also the verdict under the precision's default tolerances

With --fused the models are first optimized with every default pass (backend "onnxruntime"),
as a job does before converting, so contrib ops (MultiHeadAttention, Gelu, SkipLayerNorm...) are
converted or kept by their schemas.

    .venv/bin/python -m bench.precision [--models resnet50,bert] [--precisions fp16,bf16]
                                        [--samples 2] [--no-keep] [--fused]

The machine is shared: conversion times vary between runs; the metrics do not (seeded inputs).
"""

from __future__ import annotations

import argparse
import collections
import time
from collections.abc import Callable

import numpy as np
import onnx

from optimizer.optimize import OptimizeOptions, optimize_model
from optimizer.precision import (
    DEFAULT_KEEP,
    NO_KEEP,
    KeepPolicy,
    convert_precision,
    evaluate_precision,
    run_outputs,
)
from optimizer.registries.precisions import Precision
from optimizer.testing.real_models import bert_encoder, resnet50

BUILDERS: dict[str, Callable[[], onnx.ModelProto]] = {
    "resnet50": lambda: resnet50(batch=1),
    "bert": lambda: bert_encoder(form="dynamo"),
    "bert-torchscript": lambda: bert_encoder(form="torchscript"),
    "bert-opset20": lambda: bert_encoder(form="dynamo_opset20"),
}
Feeds = list[dict[str, np.ndarray]]


def _feeds(name: str, samples: int) -> Feeds:
    rng = np.random.default_rng(0)
    if name == "resnet50":
        return [{"input": rng.standard_normal((1, 3, 224, 224)).astype(np.float32)}
                for _ in range(samples)]
    feeds: Feeds = []
    for _ in range(samples):
        mask = np.zeros((1, 1, 1, 128), np.float32)
        mask[..., 100:] = -10000.0  # the last 28 positions are padding
        feeds.append({"input_ids": rng.integers(0, 1000, (1, 128)).astype(np.int64),
                      "attention_mask": mask})
    return feeds


def _row(label: str, original: onnx.ModelProto, feeds: Feeds, reference: Feeds,
         precision: Precision, policy: KeepPolicy) -> tuple[str, collections.Counter[str]]:
    started = time.perf_counter()
    converted, report = convert_precision(original, precision, keep_fp32=policy)
    seconds = time.perf_counter() - started
    result = evaluate_precision(original, converted, feeds, precision=precision,
                                reference=reference)
    outputs = result.validation.outputs
    cosine = min(o.cosine_similarity for o in outputs)
    max_abs = max(o.max_abs_err for o in outputs)
    verdict = "pass" if result.passed else "FAIL"
    line = (f"{label:<34} {len(original.graph.node):>6} {report.converted:>5} "
            f"{len(report.kept):>5} {report.casts_inserted:>6} {seconds:>10.2f} "
            f"{cosine:>10.6f} {max_abs:>9.3g}  {verdict}")
    reasons = collections.Counter(f"{k.op_type}: {k.reason}" for k in report.kept)
    return line, reasons


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="resnet50,bert")
    parser.add_argument("--precisions", default="fp16,bf16")
    parser.add_argument("--samples", type=int, default=2)
    parser.add_argument("--no-keep", action="store_true", help="also convert without a keep-list")
    parser.add_argument("--fused", action="store_true", help="convert the fused models")
    args = parser.parse_args()
    policies = [("default", DEFAULT_KEEP)] + ([("no keep", NO_KEEP)] if args.no_keep else [])
    print(f"{'model / precision / keep-list':<34} {'nodes':>6} {'low':>5} {'kept':>5} "
          f"{'casts':>6} {'convert s':>10} {'cosine':>10} {'max abs':>9}  verdict")
    all_reasons: collections.Counter[str] = collections.Counter()
    for name in args.models.split(","):
        model = BUILDERS[name]()
        if args.fused:
            model, _ = optimize_model(model, OptimizeOptions(backend="onnxruntime"))
            name = f"{name} (fused)"
        feeds = _feeds(name.split()[0], args.samples)
        reference = run_outputs(model, feeds)
        for precision in args.precisions.split(","):
            for policy_name, policy in policies:
                line, reasons = _row(f"{name} {precision} {policy_name}", model, feeds,
                                     reference, precision, policy)  # type: ignore[arg-type]
                print(line, flush=True)
                all_reasons.update(reasons)
    if all_reasons:
        print("\nkept in float32 (node count over all rows: op: reason)")
        for reason, count in sorted(all_reasons.items(), key=lambda item: -item[1]):
            print(f"  {count:>4}  {reason}")


if __name__ == "__main__":
    main()
