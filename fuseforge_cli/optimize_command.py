"""What `fuseforge optimize` runs (its arguments: fuseforge_cli/optimize_parser.py): the job's
fusion passes on a local file."""

from __future__ import annotations

import argparse
import json
import sys

from optimizer.errors import OptimizerError
from optimizer.model_check import load_checked_model
from optimizer.optimize import OptimizeOptions, optimize_model
from optimizer.passes import DEFAULT_PASSES
from optimizer.shapes import fix_input_shapes, resolve_input_shapes

__all__ = ["run_optimize"]


def run_optimize(args: argparse.Namespace) -> int:
    try:
        model, summary = load_checked_model(args.model)
        if args.input_shape:
            shapes = resolve_input_shapes(summary.inputs, dict(args.input_shape))
            model = fix_input_shapes(model, shapes)
        options = OptimizeOptions(backend=args.backend, passes=args.passes,
                                  catalog=args.catalog or DEFAULT_PASSES)
        fused, report = optimize_model(model, options)
    except OptimizerError as err:
        print(f"fuseforge optimize: {type(err).__name__}: {err}", file=sys.stderr)
        return 2
    # The bytes as they are: onnx.save would first walk every tensor looking for external data.
    args.output.write_bytes(fused.SerializeToString())
    if args.report:
        args.report.write_text(json.dumps(report.to_dict(), indent=2))
    print(f"{args.model} -> {args.output}: {report.nodes_before} -> {report.nodes_after} nodes "
          f"in {report.duration_s:.2f} s ({args.backend})")
    for stats in report.rules:
        if stats.applied:
            print(f"  {stats.rule:<40} applied {stats.applied}")
    for name, why in report.passes_skipped.items():
        print(f"  skipped {name}: {why}")
    for note in report.notes:
        print(f"  note: {note}")
    return 0
