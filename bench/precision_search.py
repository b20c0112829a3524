"""Precision search on the BERT-style encoder: which nodes a tight accuracy budget keeps in float32.

The encoder (optimizer.testing.real_models, random weights, batch 1, seq 128) is converted to
each precision with the default keep-list; when that misses the budget (cosine of the worst output
against the float32 original, on seeded random token ids with the last 28 positions masked),
`search_precision` keeps more nodes in float32. Accuracy is measured through the CPU emulation
(optimizer/precision/emulate.py; no GPU here). Printed per precision: the default conversion's
accuracy, the nodes the search keeps (op, measured sensitivity, why), the accuracy reached, the
evaluations used (sensitivity passes included) and the wall time.

    .venv/bin/python -m bench.precision_search [--layers 2] [--hidden 256] [--form dynamo]
        [--precisions fp16,bf16] [--fp16-cosine 0.99999] [--bf16-cosine 0.99999]
        [--samples 2] [--max-evaluations 64] [--json]

The machine is shared: times vary between runs; the kept nodes and metrics do not (seeded).
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from optimizer.precision import (
    AccuracyBudget,
    AccuracyReached,
    convert_precision,
    evaluate_precision,
    run_outputs,
    search_precision,
)
from optimizer.registries.precisions import Precision
from optimizer.testing.real_models import BERT_FORMS, bert_encoder

SEQ, PADDED, VOCAB = 128, 28, 1000


def encoder_feeds(samples: int, seed: int = 0) -> list[dict[str, np.ndarray]]:
    """Token ids in [0, VOCAB) and an additive mask hiding the last PADDED positions."""
    rng = np.random.default_rng(seed)
    mask = np.where(np.arange(SEQ) < SEQ - PADDED, 0.0, -10000.0).astype(np.float32)
    return [{"input_ids": rng.integers(0, VOCAB, (1, SEQ), dtype=np.int64),
             "attention_mask": mask.reshape(1, 1, 1, SEQ)} for _ in range(samples)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--form", default="dynamo", choices=BERT_FORMS)
    parser.add_argument("--precisions", default="fp16,bf16")
    parser.add_argument("--fp16-cosine", type=float, default=0.99999)
    parser.add_argument("--bf16-cosine", type=float, default=0.99999)
    parser.add_argument("--samples", type=int, default=2)
    parser.add_argument("--max-evaluations", type=int, default=64)
    parser.add_argument("--json", action="store_true", help="also print each result's JSON")
    args = parser.parse_args()
    model = bert_encoder(layers=args.layers, hidden=args.hidden, seq=SEQ, vocab=VOCAB,
                         form=args.form)
    feeds = encoder_feeds(args.samples)
    reference = run_outputs(model, feeds)
    print(f"BERT-style encoder ({args.form}): layers={args.layers} hidden={args.hidden} "
          f"seq={SEQ}, {len(model.graph.node)} nodes, {args.samples} samples")
    for name in args.precisions.split(","):
        precision: Precision = "bf16" if name == "bf16" else "fp16"
        budget = AccuracyBudget(min_cosine=getattr(args, f"{precision}_cosine"))
        started = time.perf_counter()
        default, report = convert_precision(model, precision)
        evaluation = evaluate_precision(model, default, feeds, precision=precision,
                                        tolerances=budget.tolerances(), reference=reference)
        default_seconds = time.perf_counter() - started
        result = search_precision(model, feeds, precision=precision, budget=budget,
                                  max_evaluations=args.max_evaluations)
        print(f"\n{precision}, budget {budget.describe()}")
        print(f"  default keep-list: {report.converted} nodes low, {len(report.kept)} kept; "
              f"{AccuracyReached.of(evaluation.validation).describe()} "
              f"({'within' if evaluation.passed else 'outside'} budget; "
              f"{default_seconds:.2f} s to convert and evaluate)")
        extra = len(result.kept_fp32_nodes)
        print(f"  search: {'within' if result.within_budget else 'OUTSIDE'} budget, "
              f"{extra} node(s) kept in float32 beyond the keep-list (which then keeps "
              f"{len(result.report.kept) - extra}, {result.default_kept} alone), "
              f"{result.converted} nodes low; "
              f"{result.accuracy.describe()}")
        print(f"          {result.evaluations} evaluations ({result.sensitivity_passes} "
              f"sensitivity passes) of {result.max_evaluations}, {result.seconds:.1f} s")
        for node in result.kept_fp32_nodes:
            print(f"    {node.name:<50} {node.op_type:<10} {node.sensitivity:>9.3g}  "
                  f"{node.reason}")
        if args.json:
            print(json.dumps(result.to_dict(), allow_nan=False, indent=1))


if __name__ == "__main__":
    main()
