"""`fuseforge optimize IN.onnx -o OUT.onnx`: run the fusion passes locally, no server needed."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from fuseforge_cli.arguments import add_output_options, input_shape, pass_selection
from fuseforge_cli.failures import EXIT_CODES_HELP
from optimizer.registries.backends import BACKENDS, DEFAULT_BACKEND
from optimizer.registries.precisions import REFERENCE_PRECISION
from optimizer.registries.quantization import CalibrationMethod, QuantizationMode

if TYPE_CHECKING:
    from optimizer.passes import FusionPass

__all__ = ["add_optimize_parser"]


def add_optimize_parser(sub: argparse._SubParsersAction,  # type: ignore[type-arg]
                        *, catalog: Sequence[FusionPass] | None) -> None:
    """Add `optimize`, whose --passes select from `catalog` (default: the default passes; see
    OptimizeOptions.catalog)."""
    parser = sub.add_parser("optimize", help="fuse a model locally (same passes as a job)",
                            description=__doc__, epilog=EXIT_CODES_HELP,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", type=Path, help="the .onnx file to optimize")
    parser.add_argument("-o", "--output", type=Path, required=True, help="where to write the result")
    parser.add_argument("--passes", type=pass_selection, default="all",
                        help="all | none | comma-separated pass names (default: all)")
    parser.add_argument("--backend", choices=list(BACKENDS), default=DEFAULT_BACKEND)
    parser.add_argument("--input-shape", type=input_shape, action="append", default=[],
                        metavar="NAME=D1,D2,...",
                        help="fix an input's shape (repeatable); dynamic dims (named, unknown or "
                             "-1 in the model) default to 1")
    parser.add_argument("--report", type=Path, help="write the fusion report as JSON here")
    # Quantized locally as the default backend's jobs are: calibrated, judged and timed in ONNX
    # Runtime on this CPU.
    local = BACKENDS[DEFAULT_BACKEND].quantized_precisions
    quantized = "/".join(local)
    parser.add_argument("--precision", choices=[REFERENCE_PRECISION, *local],
                        default=REFERENCE_PRECISION,
                        help=f"{quantized}: quantize the fused model (onnxruntime flavours), "
                        "written only when within its accuracy limits and faster; else the "
                        f"{REFERENCE_PRECISION} one is")
    parser.add_argument("--calibration", type=Path, metavar="DATA.npz",
                        help=f"with --precision {quantized}: the calibration samples")
    parser.add_argument("--validation", type=Path, metavar="DATA.npz",
                        help=f"with --precision {quantized}: held-apart samples to judge it on "
                        "(default: the last fifth of --calibration)")
    parser.add_argument("--quantization-mode", choices=list(QuantizationMode))
    parser.add_argument("--calibration-method", choices=list(CalibrationMethod))
    add_output_options(parser)
    parser.set_defaults(func=_run_optimize, catalog=catalog)


def _run_optimize(args: argparse.Namespace) -> int:
    # Imported on use: the passes need onnx and onnxscript, `fuseforge --help` does not.
    from fuseforge_cli.optimize_command import run_optimize

    return run_optimize(args)
