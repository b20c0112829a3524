"""The arguments of `fuseforge submit` (the command itself is submit_command.py, imported when
it runs, so `fuseforge --help` does not load httpx)."""

from __future__ import annotations

import argparse
from pathlib import Path

from fuseforge_cli.arguments import input_range, input_shape
from fuseforge_cli.failures import EXIT_CODES_HELP
from fuseforge_cli.search_parser import add_search_options
from optimizer.registries.backends import BACKENDS
from optimizer.registries.precisions import PRECISIONS
from optimizer.registries.quantization import CalibrationMethod, QuantizationMode

__all__ = ["add_submit_parser"]

_EPILOG = """The server is --url, else FUSEFORGE_URL, else http://FUSEFORGE_HOST:FUSEFORGE_PORT
(the settings `fuseforge run` starts the server with), else the one `fuseforge run` running
on this host (it records its URL), else http://127.0.0.1:8000; the API key is --api-key, else
FUSEFORGE_API_KEY. The first line on stderr names the server.
--config takes a job body as JSON (see POST /v1/jobs in the server's /docs, without
model_id); --backend, --precision, --input-shape, --input-range and the search options
override its fields. Progress goes to stderr, results to stdout; the job's page on the
dashboard (<server>/ui/jobs/<id>) is printed as soon as the job exists.

Before anything is uploaded, the job's input shapes, ranges and datasets are checked against
the model here, by the server's own rules: a dataset holds one array per model input, named
after it, shaped [samples, *input shape] with the batch dim included (an input [1, 3, 224,
224] takes an array [S, 1, 3, 224, 224]), in the input's dtype.

With --wait, Ctrl-C stops following the job, not the job (exit 130): `fuseforge jobs wait
<id>` follows it again, `fuseforge jobs cancel <id>` stops it.

"""


def add_submit_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = sub.add_parser("submit", help="optimize a model on a FuseForge server",
                            description="Upload a model to a FuseForge server, start a job on "
                            "it and, with --wait, follow it to its verdict and download its "
                            "artifacts.", epilog=_EPILOG + EXIT_CODES_HELP,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", type=Path, help="the .onnx file to upload")
    parser.add_argument("--backend", choices=list(BACKENDS), help="default: the config's, else onnxruntime")
    parser.add_argument("--precision", choices=list(PRECISIONS), help="default: the config's, else fp32")
    parser.add_argument("--calibration", type=Path, metavar="DATA.npz",
                        help="with --precision int8 (or --search, for its int8 static "
                        "candidate): upload this .npz as the job's calibration "
                        "dataset (static quantization; part of it is held apart to judge the "
                        "engine unless the config names a dataset_id)")
    parser.add_argument("--quantization-mode", choices=list(QuantizationMode),
                        help="with --precision int8 (default auto)")
    parser.add_argument("--calibration-method", choices=list(CalibrationMethod),
                        help="with --calibration (default auto)")
    parser.add_argument("--config", type=Path, metavar="JOB.json",
                        help="job options as a JSON object (POST /v1/jobs's body, no model_id)")
    parser.add_argument("--input-shape", type=input_shape, action="append", default=[],
                        metavar="NAME=D1,D2,...",
                        help="fix an input's shape (repeatable; default: the model's, dynamic "
                        "dims at 1), e.g. input=1,3,224,224")
    parser.add_argument("--input-range", type=input_range, action="append", default=[],
                        metavar="NAME=LOW,HIGH",
                        help="draw an input's random values from [LOW, HIGH) (repeatable), e.g. "
                        "input_ids=0,30522 or a control input's one value, sr=16000,16001; "
                        "default: inferred from the graph, else [0, 10) for integers")
    parser.add_argument("--validation", type=Path, metavar="DATA.npz",
                        help="upload this .npz as the job's validation dataset (real inputs, "
                        "one array per model input; the job's dataset_id) instead of random "
                        "inputs")
    parser.add_argument("--wait", action="store_true",
                        help="follow the job to its end, print the verdict, exit by its outcome")
    parser.add_argument("--timeout", type=float, default=3600.0, metavar="SECONDS",
                        help="with --wait: give up (exit 1) after this long (default 3600)")
    parser.add_argument("--output", type=Path, metavar="DIR",
                        help="with --wait: download every artifact of a successful job here")
    parser.add_argument("--fail-on-regression", action="store_true",
                        help="with --wait: exit 5, printing the figures, when the server flagged "
                        "the job's engine: its speed-up over the original fell below the "
                        "model's best earlier one (same shipped configuration and environment)")
    add_search_options(parser)
    parser.add_argument("--url", help="the server (default: FUSEFORGE_URL)")
    parser.add_argument("--api-key", help="the API key (default: FUSEFORGE_API_KEY)")
    parser.add_argument("--json", action="store_true",
                        help="print the job as JSON on stdout (the final job with --wait)")
    parser.add_argument("--debug", action="store_true", help="show tracebacks on failure")
    parser.set_defaults(func=_run_submit)


def _run_submit(args: argparse.Namespace) -> int:
    # Imported on use: httpx and the client are not needed by `fuseforge --help`.
    from fuseforge_cli.submit_command import run_submit

    return run_submit(args)
