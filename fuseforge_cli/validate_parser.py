"""`fuseforge validate ORIGINAL.onnx CANDIDATE.onnx`: a job's accuracy check, locally.

The original runs in ONNX Runtime on the CPU with every graph optimization disabled (the fp32
reference); the candidate runs as given. Random inputs: an integer input is drawn in the range
its use allows (token ids below the embedding's rows, a mask in {0, 1}; the report lists them;
--input-range overrides). With dynamic dims and no --input-shape, both models are checked at
the default shape (dynamic dims 1) and at batch 2 with other dynamic dims 16, where the
original runs at it (a softmax over one key hides a broken attention mask); the verdict names
the shapes.

When the candidate fails, the report also names the first tensor where it departs from the
original (compared on the first few samples) and what produced it. With --bisect the candidate
is taken to be ORIGINAL optimized by FuseForge's passes (--passes, --backend): ORIGINAL is
optimized again, at the candidate's input shapes, with halves of the rules that fired, until
the rule(s) that break the check are named (fuseforge_cli/bisect_candidate.py). A problem while
localising or bisecting is written to stderr; the exit code stays the verdict's.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from fuseforge_cli.arguments import (
    DEFAULT_SAMPLES,
    add_output_options,
    input_range,
    input_shape,
    pass_selection,
)
from fuseforge_cli.failures import EXIT_CODES_HELP
from optimizer.registries.backends import BACKENDS
from optimizer.registries.precisions import PRECISIONS, REFERENCE_PRECISION

if TYPE_CHECKING:
    from optimizer.passes import FusionPass

__all__ = ["add_validate_parser"]


def _tolerance(text: str) -> tuple[str, float]:
    name, sep, value = text.partition("=")
    try:
        if not sep or not name:
            raise ValueError
        return name, float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--tolerance {text!r}: expected NAME=VALUE, e.g. atol=1e-3 or min_snr_db=40"
        ) from None


def add_validate_parser(sub: argparse._SubParsersAction,  # type: ignore[type-arg]
                        *, catalog: Sequence[FusionPass] | None) -> None:
    """Add `validate`, whose --bisect optimizes again with passes from `catalog` (default: the
    default passes; see OptimizeOptions.catalog)."""
    parser = sub.add_parser(
        "validate", help="check an optimized model against the original (same check as a job)",
        description=__doc__, epilog=EXIT_CODES_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("original", type=Path, help="the unmodified model (the reference)")
    parser.add_argument("candidate", type=Path, help="the optimized model to check")
    parser.add_argument("--dataset", type=Path,
                        help=".npz with one array per input (leading sample axis) and optional "
                             "'labels'; default: seeded random inputs")
    parser.add_argument("--precision", choices=list(PRECISIONS), default=REFERENCE_PRECISION,
                        help="the candidate's precision, which sets the default tolerances")
    parser.add_argument("--samples", type=int, default=None,
                        help=f"random input sets (default {DEFAULT_SAMPLES}), or the first N "
                             "samples of --dataset (default all)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    parser.add_argument("--input-shape", type=input_shape, action="append", default=[],
                        metavar="NAME=D1,D2,...",
                        help="fix an input's shape (repeatable); without it, dynamic dims are "
                             "checked at 1 and at a larger size")
    parser.add_argument("--input-range", type=input_range, action="append", default=[],
                        metavar="NAME=LOW,HIGH",
                        help="draw a random input from [LOW, HIGH) (repeatable), e.g. "
                             "input_ids=0,30522; default: inferred from the graph")
    parser.add_argument("--tolerance", type=_tolerance, action="append", default=[],
                        metavar="NAME=VALUE",
                        help="override a limit (repeatable): atol, rtol, min_cosine, "
                             "max_rel_err, max_rmse, min_snr_db, min_top1_agreement, "
                             "min_top5_agreement, max_accuracy_drop")
    parser.add_argument("--class-output", action="append", default=None, metavar="NAME",
                        help="treat this output's last axis as class scores (repeatable); "
                             "default: every float output shaped [batch, classes]")
    parser.add_argument("--bisect", action="store_true",
                        help="on failure, optimize ORIGINAL again with halves of the rules that "
                             "fired and name the rule(s) that break the check")
    parser.add_argument("--passes", type=pass_selection, default=None,
                        help="with --bisect: the passes CANDIDATE was optimized with, all | "
                             "none | comma-separated pass names (default: all)")
    parser.add_argument("--backend", choices=list(BACKENDS), default=None,
                        help="with --bisect: the backend CANDIDATE was optimized for "
                             "(default: onnxruntime)")
    add_output_options(parser)
    parser.set_defaults(func=_run_validate, catalog=catalog)


def _run_validate(args: argparse.Namespace) -> int:
    # Imported on use: the check needs onnx and ONNX Runtime, `fuseforge --help` does not.
    from fuseforge_cli.validate_command import run_validate

    return run_validate(args)
