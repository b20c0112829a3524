"""What `fuseforge optimize` runs (its arguments: fuseforge_cli/optimize_parser.py): the job's
fusion passes on a local file."""

from __future__ import annotations

import argparse
import json

import onnx

from fuseforge_cli.failures import EXIT_OK, EXIT_USAGE, CliFailure, readable_file
from fuseforge_cli.local_int8 import quantize_locally, summary_lines
from fuseforge_cli.memory_reuse import reuse_freed_memory
from fuseforge_cli.runtime_logging import quiet_onnxruntime
from optimizer.errors import PassError
from optimizer.model_check import load_checked_model
from optimizer.model_writer import data_file_name, save_model
from optimizer.optimize import OptimizeOptions, optimize_model, select_passes
from optimizer.passes import DEFAULT_PASSES
from optimizer.registries.backends import BACKENDS, DEFAULT_BACKEND, Backend
from optimizer.registries.precisions import PRECISIONS, Precision
from optimizer.static_model import static_model

__all__ = ["run_optimize"]


def run_optimize(args: argparse.Namespace) -> int:
    """Optimize args.model into args.output; the exit code (fuseforge_cli/failures.py).

    Raises:
        CliFailure, OptimizerError, OSError: main() says them as one line and an exit code.
    """
    quiet_onnxruntime(debug=args.debug)
    reuse_freed_memory()  # one model, then the process ends: see fuseforge_cli/memory_reuse.py
    quantizes = PRECISIONS[Precision(args.precision)].quantizes
    if not quantizes and (args.calibration or args.validation):
        raise CliFailure("UsageError", "--calibration and --validation go with a quantized "
                         f"--precision ({', '.join(BACKENDS[DEFAULT_BACKEND].quantized_precisions)}).",
                         EXIT_USAGE)
    if quantizes and not BACKENDS[Backend(args.backend)].ort_runs_engines:
        local = ", ".join(b for b, spec in BACKENDS.items() if spec.ort_runs_engines)
        raise CliFailure("UsageError", f"--precision {args.precision} runs locally on ONNX "
                         f"Runtime (backend {local}); submit a {args.backend} {args.precision} "
                         "job to a server with a worker for it.", EXIT_USAGE)
    options = OptimizeOptions(backend=args.backend, passes=args.passes,
                              catalog=args.catalog or DEFAULT_PASSES, for_quantization=quantizes)
    try:
        select_passes(options)  # unknown pass names: bad usage, refused before any work
    except PassError as err:
        raise CliFailure(type(err).__name__, str(err), EXIT_USAGE) from err
    original, summary = load_checked_model(readable_file(args.model), external_data=True)
    # External data (checked to stay in the model's folder) stays on disk through the passes;
    # int8 calibration runs the model from memory, so it is read in whole for that.
    data_folder = args.model.parent if summary.external_data is not None else None
    if data_folder is not None and quantizes:
        onnx.load_external_data_for_model(original, str(data_folder))
        data_folder = None
    model = (static_model(original, dict(args.input_shape), data_folder=data_folder).model
             if args.input_shape else original)
    fused, report = optimize_model(model, options, data_folder=data_folder)
    quantized = quantize_locally(model, fused, args) if quantizes else None
    if quantized is not None and quantized.model is not None:
        fused = quantized.model
    try:
        # Loads and runs in ONNX Runtime first: a refusal beats a file that cannot be loaded.
        save_model(fused, args.output, what=f"the optimized model {args.output.name!r}",
                   reference=original, data_location=data_file_name(args.output, summary),
                   data_folder=data_folder)
        if args.report:
            args.report.write_text(json.dumps(report.to_dict(), indent=2))
    except OSError as err:
        raise CliFailure("OutputUnwritable", f"cannot write {err.filename or args.output!s}: "
                         f"{err.strerror or err}; give a path in a writable folder.",
                         EXIT_USAGE) from err
    if args.json:
        print(json.dumps({"model": str(args.model), "output": str(args.output),
                          "backend": args.backend, "exit_code": EXIT_OK,
                          "report": report.to_dict(),
                          **({"quantization": quantized.to_dict()} if quantized else {})},
                         indent=2))
        return EXIT_OK
    print(f"{args.model} -> {args.output}: {report.nodes_before} -> {report.nodes_after} nodes "
          f"in {report.duration_s:.2f} s ({args.backend})")
    for stats in report.rules:
        if stats.applied:
            print(f"  {stats.rule:<40} applied {stats.applied}")
    for name, why in report.passes_skipped.items():
        print(f"  skipped {name}: {why}")
    for note in report.notes:
        print(f"  note: {note}")
    if quantized is not None:
        print("\n".join(summary_lines(quantized, args.output)))
    return EXIT_OK
