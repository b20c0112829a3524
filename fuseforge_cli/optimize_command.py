"""What `fuseforge optimize` runs (its arguments: fuseforge_cli/optimize_parser.py): the job's
fusion passes on a local file."""

from __future__ import annotations

import argparse
import json
import sys

from optimizer.errors import OptimizerError
from optimizer.model_check import load_checked_model
from optimizer.model_writer import save_model
from optimizer.optimize import OptimizeOptions, optimize_model
from optimizer.passes import DEFAULT_PASSES
from optimizer.static_model import static_model

__all__ = ["run_optimize"]


def run_optimize(args: argparse.Namespace) -> int:
    try:
        original, _ = load_checked_model(args.model)
        model = static_model(original, dict(args.input_shape)).model if args.input_shape \
            else original
        options = OptimizeOptions(backend=args.backend, passes=args.passes,
                                  catalog=args.catalog or DEFAULT_PASSES)
        fused, report = optimize_model(model, options)
        # Loads and runs in ONNX Runtime first: a refusal beats a file that cannot be loaded.
        save_model(fused, args.output, what=f"the optimized model {args.output.name!r}",
                   reference=original)
    except OptimizerError as err:
        print(f"fuseforge optimize: {type(err).__name__}: {err}", file=sys.stderr)
        return 2
    if args.report:
        args.report.write_text(json.dumps(report.to_dict(), indent=2))
    print(f"{args.model} -> {args.output}: {report.nodes_before} -> {report.nodes_after} nodes "
          f"in {report.duration_s:.2f} s ({args.backend})")
    for stats in report.rules:
        if stats.applied:
            print(f"  {stats.rule:<40} applied {stats.applied}")
    for name, why in report.passes_skipped.items():
        print(f"  skipped {name}: {why}")
    return 0
