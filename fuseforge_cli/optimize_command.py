"""`fuseforge optimize IN.onnx -o OUT.onnx`: run the fusion passes locally, no server needed."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import onnx

from fuseforge_cli.arguments import input_shape, pass_selection
from optimizer.errors import OptimizerError
from optimizer.model_check import check_model_file
from optimizer.optimize import OptimizeOptions, optimize_model
from optimizer.passes import BACKENDS, FusionPass
from optimizer.shapes import fix_input_shapes, resolve_input_shapes

__all__ = ["add_optimize_parser"]


def add_optimize_parser(sub: argparse._SubParsersAction,  # type: ignore[type-arg]
                        *, catalog: tuple[FusionPass, ...]) -> None:
    """Add `optimize`, whose --passes select from `catalog` (see OptimizeOptions.catalog)."""
    parser = sub.add_parser("optimize", help="fuse a model locally (same passes as a job)")
    parser.add_argument("model", type=Path, help="the .onnx file to optimize")
    parser.add_argument("-o", "--output", type=Path, required=True, help="where to write the result")
    parser.add_argument("--passes", type=pass_selection, default="all",
                        help="all | none | comma-separated pass names (default: all)")
    parser.add_argument("--backend", choices=BACKENDS, default="onnxruntime")
    parser.add_argument("--input-shape", type=input_shape, action="append", default=[],
                        metavar="NAME=D1,D2,...",
                        help="fix an input's shape (repeatable); dynamic dims default to 1")
    parser.add_argument("--report", type=Path, help="write the fusion report as JSON here")
    parser.set_defaults(func=run_optimize, catalog=catalog)


def run_optimize(args: argparse.Namespace) -> int:
    try:
        summary = check_model_file(args.model)
        model = onnx.load(args.model, format="protobuf")
        if args.input_shape:
            shapes = resolve_input_shapes(summary.inputs, dict(args.input_shape))
            model = fix_input_shapes(model, shapes)
        options = OptimizeOptions(backend=args.backend, passes=args.passes,
                                  catalog=args.catalog)
        fused, report = optimize_model(model, options)
    except OptimizerError as err:
        print(f"fuseforge optimize: {type(err).__name__}: {err}", file=sys.stderr)
        return 2
    onnx.save(fused, args.output)
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
