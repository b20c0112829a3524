"""Issue 46's targets: what a FuseForge search ships on this CPU, against the original at ONNX
Runtime ENABLE_ALL and every peer a user reaches by hand, timed side by side in one run.

For each model and each thread count (1 and 2 by default) a search job runs through the service
as a user runs it: `fuseforge run` on a fresh data folder, the model uploaded, its input shapes,
a calibration dataset and the thread count in the job. Its shipped engine (whatever backend and
precision won, or the original) is downloaded and timed interleaved in this one process
(optimizer/measure/interleaved.py: the median over rounds of each variant's time over the
original's in the same round, with its bootstrap interval) against:

  ort original   the upload at ONNX Runtime ENABLE_ALL: the yardstick, what the user has
  fuseforge      the engine the search shipped, opened by its backend's runner
  ort-only       (--ort-only) FuseForge before OpenVINO: the same search on ONNX Runtime only
  ort qdq u8s8   onnxruntime.quantization.quantize_static on the original, the same
  ort qdq s8s8   calibration samples (MinMax, QDQ, per-channel int8 weights)
  ov default     OpenVINO CPU with no precision hint (bf16 on a CPU with AVX512_BF16 or AMX)
  ov nncf int8   nncf.quantize (defaults) on the same calibration samples, compiled as ov default

Accuracy: each variant's worst output cosine against the original's on held-apart inputs
(another seed than calibration and timing). Inputs: synthetic text images for the PP-OCR models
(bench/openvino_baseline.py), standard-normal images for the code-built ResNet-50, token ids
and a padded mask for the BERT-style encoder, the graph's own input ranges for the YOLOv8 export.

Verdicts printed under the table, per model and thread count:
  PP-OCR        fuseforge <= 0.55x the original (<= 0.70x with --no-bf16) at cosine >= 0.99
  the others    fuseforge at or below the best peer whose cosine is >= 0.99 (a tie: the two
                intervals overlap)

    .venv/bin/python -m bench.openvino_targets [--models ppocr-det-v5,resnet50] [--threads 1,2]
        [--rounds 9] [--time-budget-s 300] [--ort-only] [--no-bf16]
        [--out bench-results/openvino_targets.md]

Needs the `openvino` extra. The machine is shared and noisy: compare ratios from one run only.
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort

from bench.corpus.cache import build_model
from bench.corpus.catalog import by_name
from bench.openvino_baseline import MODELS as OCR_MODELS
from bench.openvino_baseline import fixed_model, output_accuracy, text_images
from bench.quantize import code_feeds, ort_quantizer_peer
from bench.service.stack import free_port, fuseforge_env, start_fuseforge, stop, wait_healthy
from fuseforge_client import FuseForgeClient, JobError
from optimizer.backends.onnxruntime.runner import OnnxRuntimeRunner
from optimizer.backends.runner import Runner
from optimizer.measure.interleaved import LatencyRatio, interleaved_call_ratios
from optimizer.model.input_ranges import effective_ranges, infer_input_ranges
from optimizer.model.inputs import random_feeds
from optimizer.model.shapes import fix_input_shapes, resolve_input_shapes
from optimizer.model.tensor_specs import summarize_model
from optimizer.testing.real_models import bert_encoder, resnet50

__all__ = ["main"]

Feed = dict[str, np.ndarray]
OCR_TARGET, OCR_TARGET_NO_BF16, MIN_COSINE = 0.55, 0.70, 0.99
CALIBRATION_SEED, VALIDATION_SEED, TIMING_SEED = 2, 1, 0
PEERS = ("ort qdq u8s8", "ort qdq s8s8", "ov default", "ov nncf int8")
_CODE_BUILT: dict[str, Callable[[], onnx.ModelProto]] = {
    "resnet50": lambda: resnet50(batch=1), "bert": lambda: bert_encoder()}
_CORPUS = ("yolov8n-nudenet",)


@dataclass
class Subject:
    """A model with its shapes fixed, and its three sets of inputs."""

    name: str
    path: Path
    calibration: list[Feed]
    validation: list[Feed]
    timing: Feed
    ocr: bool


@dataclass
class Variant:
    """One way to run the model at one thread count: its call, accuracy and what it is."""

    label: str
    run: Callable[[], object] | None
    note: str = ""
    cosine: float = math.nan
    ratio: LatencyRatio | None = None


@dataclass
class Row:
    model: str
    threads: int
    variants: list[Variant] = field(default_factory=list)
    search_s: float | None = None


# ---------------------------------------------------------------------------------------------
# Models and inputs


def _subjects(names: Sequence[str], cache: Path, work: Path, calibration: int,
              validation: int) -> list[Subject]:
    subjects = []
    ocr = {name: (spec, shape) for name, spec, shape in OCR_MODELS}
    for name in names:
        if name in ocr:
            spec, shape = ocr[name]
            path, model = fixed_model(name, spec, shape, cache, work)
            [input_name] = [i.name for i in summarize_model(model).inputs]
            feeds = partial(text_images, input_name, shape)
            subjects.append(Subject(name, path, feeds(calibration, CALIBRATION_SEED),
                                    feeds(validation, VALIDATION_SEED),
                                    feeds(1, TIMING_SEED)[0], ocr=True))
            continue
        if name in _CODE_BUILT:
            model = _CODE_BUILT[name]()
            make: Callable[[int, int], list[Feed]] = partial(code_feeds, name)
        else:
            [corpus] = by_name([name])
            file = build_model(cache, corpus, cache / "openvino-targets-build.log")
            model = onnx.load(file.path)
            model = fix_input_shapes(model, resolve_input_shapes(
                summarize_model(model).inputs, corpus.input_shapes))
            ranges = effective_ranges(infer_input_ranges(model), corpus.input_ranges)
            make = partial(_random, summarize_model(model).inputs, ranges)
        path = work / f"{name}.onnx"
        onnx.save(model, path)
        subjects.append(Subject(name, path, make(calibration, CALIBRATION_SEED),
                                make(validation, VALIDATION_SEED), make(1, TIMING_SEED)[0],
                                ocr=False))
    return subjects


def _random(inputs: Any, ranges: Any, count: int, seed: int) -> list[Feed]:
    return random_feeds(inputs, count=count, seed=seed, ranges=ranges)


# ---------------------------------------------------------------------------------------------
# FuseForge, through the service


@dataclass(frozen=True)
class Shipped:
    """The engine a search shipped, downloaded into `folder`, and the job's headline."""

    folder: Path | None  # None: the original shipped
    backend: str
    headline: str
    seconds: float


def _search(client: FuseForgeClient, subject: Subject, threads: int, work: Path,
            args: argparse.Namespace, backends: list[str] | None) -> Shipped | str:
    """Run one search job; its shipped engine, or why there is none."""
    uploaded = client.upload_model(subject.path)
    data = work / f"{subject.name}.calibration.npz"
    arrays: dict[str, Any] = {key: np.stack([feed[key] for feed in subject.calibration])
                              for key in subject.calibration[0]}
    np.savez(data, **arrays)
    search: dict[str, Any] = {"time_budget_s": args.time_budget_s}
    if backends is not None:
        search["backends"] = backends
    if args.no_bf16:  # what a worker on a CPU without bf16 would try
        search["precisions"] = ["fp32", "fp16", "int8"]
    fields: dict[str, Any] = {
        "search": search, "intra_op_threads": threads,
        "quantization": {"calibration": client.upload_dataset(data, role="calibration").id}}
    started = time.monotonic()
    try:
        job = client.wait(client.submit_job(uploaded.id, **fields).id, timeout_s=4 * 3600)
    except JobError as err:
        return f"search failed: {err}"
    seconds = time.monotonic() - started
    outcome = job.outcome
    headline = outcome.headline if outcome is not None else "no outcome"
    if outcome is None or outcome.shipped is None:
        return f"nothing shipped: {headline}"
    names = {a.name for a in job.artifacts}
    backend = outcome.shipped.backend
    if outcome.shipped.what == "original":
        return Shipped(None, backend, headline, seconds)
    folder = work / f"{subject.name}.{threads}t.{job.id}"
    client.download_artifacts(job, folder, names=[n for n in names if n.startswith(("engine",
                                                                                    "manifest"))])
    return Shipped(folder, backend, headline, seconds)


def _open_shipped(shipped: Shipped, subject: Subject, threads: int) -> Runner:
    """A runner on the shipped engine, by the files its backend wrote (its manifest records
    the job's threads)."""
    if shipped.folder is None:
        return OnnxRuntimeRunner(subject.path, optimization_level="all", intra_op_threads=threads)
    if (shipped.folder / "engine.xml").exists():
        from optimizer.backends.openvino.build import runner_for_engine  # noqa: PLC0415

        return runner_for_engine(shipped.folder)
    from optimizer.backends.onnxruntime.build import (  # noqa: PLC0415
        runner_for_engine as ort_runner_for_engine,
    )

    return ort_runner_for_engine(shipped.folder)


# ---------------------------------------------------------------------------------------------
# Peers


def _peer_runs(subject: Subject, threads: int, work: Path, stack: ExitStack
               ) -> list[tuple[str, Callable[[Feed], Sequence[np.ndarray]] | str]]:
    """Each peer's call on a feed (its outputs in the original's order), or why it has none."""
    import openvino as ov  # noqa: PLC0415  # the optional extra: main() says when it is missing

    peers: list[tuple[str, Callable[[Feed], Sequence[np.ndarray]] | str]] = []
    for label in PEERS[:2]:
        out = work / f"{subject.name}.{label.replace(' ', '-')}.onnx"
        if not out.exists():
            quantized = ort_quantizer_peer(label, subject.path, subject.calibration, out)
            if quantized.path is None:
                peers.append((label, quantized.note))
                continue
        runner = stack.enter_context(OnnxRuntimeRunner(out, optimization_level="all",
                                                       intra_op_threads=threads))
        peers.append((label, partial(_ordered, runner)))
    core = ov.Core()
    config = {"PERFORMANCE_HINT": "LATENCY", "INFERENCE_NUM_THREADS": threads}
    peers.append(("ov default", partial(_ov_call, core.compile_model(str(subject.path), "CPU",
                                                                     config))))
    try:
        import nncf  # noqa: PLC0415  # the optional extra

        quantized = nncf.quantize(core.read_model(str(subject.path)),
                                  nncf.Dataset([dict(f) for f in subject.calibration]),
                                  subset_size=len(subject.calibration))
        peers.append(("ov nncf int8", partial(_ov_call, core.compile_model(quantized, "CPU",
                                                                           config))))
    except Exception as err:  # the peer's failure is a row, not the end of the run
        peers.append(("ov nncf int8", f"failed: {type(err).__name__}: {err}"[:200]))
    return peers


def _ordered(runner: Runner, feed: Feed) -> list[np.ndarray]:
    outputs = runner.infer(feed)
    return [outputs[name] for name in runner.output_names]


def _ov_call(compiled: Any, feed: Feed) -> list[np.ndarray]:
    result = compiled.create_infer_request().infer(feed)
    return [np.asarray(result[port]) for port in compiled.outputs]


# ---------------------------------------------------------------------------------------------
# One model at one thread count


def _measure(subject: Subject, threads: int, shipped: dict[str, Shipped | str], work: Path,
             rounds: int) -> Row:
    row = Row(subject.name, threads)
    with ExitStack() as stack:
        original = stack.enter_context(OnnxRuntimeRunner(
            subject.path, optimization_level="all", intra_op_threads=threads))
        calls: list[tuple[str, Callable[[Feed], Sequence[np.ndarray]] | str, str]] = [
            ("ort original", partial(_ordered, original), "the yardstick")]
        for label, result in shipped.items():
            if isinstance(result, str):
                calls.append((label, result, ""))
                continue
            runner = stack.enter_context(_open_shipped(result, subject, threads))
            note = f"{result.headline} (search {result.seconds:.0f} s)"
            calls.append((label, partial(_ordered, runner), note))
        calls.extend((label, call, "") for label, call in _peer_runs(subject, threads, work,
                                                                     stack))
        want = [np.stack(o) for o in zip(*(_ordered(original, f) for f in subject.validation),
                                         strict=True)]
        for label, call, note in calls:
            if isinstance(call, str):
                row.variants.append(Variant(label, None, call))
                continue
            got = [np.stack(o) for o in zip(*(call(f) for f in subject.validation), strict=True)]
            cosine, _ = output_accuracy(got, want)
            row.variants.append(Variant(label, partial(call, subject.timing), note, cosine))
        print(f"  {subject.name}: timing {len(row.variants)} variants at {threads} thread(s) ...",
              file=sys.stderr, flush=True)
        timed = [v for v in row.variants if v.run is not None]
        ratios = interleaved_call_ratios([v.run for v in timed if v.run is not None],
                                         rounds=rounds)
        for variant, ratio in zip(timed, ratios, strict=True):
            variant.ratio = ratio
    return row


# ---------------------------------------------------------------------------------------------
# Output


def _ratio(ratio: LatencyRatio | None) -> str:
    return "-" if ratio is None else \
        f"{ratio.ratio:.3f} [{ratio.ratio_low:.3f}, {ratio.ratio_high:.3f}]"


def _verdict(row: Row, ocr: bool, no_bf16: bool) -> str:
    mine = next((v for v in row.variants if v.label == "fuseforge"), None)
    if mine is None or mine.ratio is None:
        return f"{row.model} @{row.threads}t: MISSED, FuseForge shipped nothing to time"
    if ocr:
        target = OCR_TARGET_NO_BF16 if no_bf16 else OCR_TARGET
        met = mine.ratio.ratio <= target and mine.cosine >= MIN_COSINE
        return (f"{row.model} @{row.threads}t: {'met' if met else 'MISSED'}: "
                f"{mine.ratio.ratio:.3f}x (target <= {target}), cosine {mine.cosine:.4f} "
                f"(target >= {MIN_COSINE})")
    peers = [v for v in row.variants if v.label in PEERS and v.ratio is not None
             and v.cosine >= MIN_COSINE]
    if not peers:
        return f"{row.model} @{row.threads}t: no peer within budget; FuseForge " \
               f"{mine.ratio.ratio:.3f}x, cosine {mine.cosine:.4f}"
    best = min(peers, key=lambda v: v.ratio.ratio if v.ratio else math.inf)
    assert best.ratio is not None
    met = mine.ratio.ratio_low <= best.ratio.ratio_high and mine.cosine >= MIN_COSINE
    return (f"{row.model} @{row.threads}t: {'met' if met else 'MISSED'}: FuseForge "
            f"{mine.ratio.ratio:.3f}x cosine {mine.cosine:.4f}; best peer {best.label} "
            f"{best.ratio.ratio:.3f}x cosine {best.cosine:.4f}")


def _table(rows: Sequence[Row]) -> list[str]:
    lines = ["| model | threads | variant | ratio [95% CI] | cosine | note |",
             "|---|---|---|---|---|---|"]
    for row in rows:
        for v in row.variants:
            cosine = "-" if math.isnan(v.cosine) else f"{v.cosine:.5f}"
            lines.append(f"| {row.model} | {row.threads} | {v.label} | {_ratio(v.ratio)} | "
                         f"{cosine} | {v.note[:160]} |")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    known = [name for name, _, _ in OCR_MODELS] + list(_CODE_BUILT) + list(_CORPUS)
    parser.add_argument("--models", default=",".join(known))
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--time-budget-s", type=float, default=300)
    parser.add_argument("--calibration-samples", type=int, default=16)
    parser.add_argument("--validation-samples", type=int, default=8)
    parser.add_argument("--ort-only", action="store_true",
                        help="also run the search on ONNX Runtime only (FuseForge before OpenVINO)")
    parser.add_argument("--no-bf16", action="store_true",
                        help="search without bf16, as a worker on a CPU without it does")
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "fuseforge")
    parser.add_argument("--log", type=Path, default=Path("openvino-targets.log"))
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    names = [n for n in args.models.split(",") if n]
    unknown = sorted(set(names) - set(known))
    if unknown:
        parser.error(f"unknown model(s) {', '.join(unknown)}; choose from {', '.join(known)}")
    try:
        import openvino  # noqa: F401, PLC0415
    except ImportError:
        parser.error("openvino is not installed: .venv/bin/python -m pip install -e '.[openvino]'")
    ort.set_default_logger_severity(3)  # Paddle exports' unused initializers, one line each
    thread_counts = [int(t) for t in args.threads.split(",")]
    rows: list[Row] = []
    verdicts: list[str] = []
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="fuseforge-openvino-targets-") as tmp:
        work = Path(tmp)
        server = start_fuseforge("run", fuseforge_env(work / "data", port), args.log)
        try:
            wait_healthy(f"http://127.0.0.1:{port}/healthz", server)
            with FuseForgeClient(f"http://127.0.0.1:{port}") as client:
                for subject in _subjects(names, args.cache.expanduser(), work,
                                         args.calibration_samples, args.validation_samples):
                    for threads in thread_counts:
                        print(f"  {subject.name}: search at {threads} thread(s) ...",
                              file=sys.stderr, flush=True)
                        shipped = {"fuseforge": _search(client, subject, threads, work, args,
                                                        None)}
                        if args.ort_only:
                            shipped["ort-only"] = _search(client, subject, threads, work, args,
                                                          ["onnxruntime"])
                        row = _measure(subject, threads, shipped, work, args.rounds)
                        rows.append(row)
                        verdicts.append(_verdict(row, subject.ocr, args.no_bf16))
                        print(verdicts[-1], file=sys.stderr, flush=True)
        finally:
            stop(server)
    text = "\n".join([*_table(rows), "", *verdicts])
    print(text)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    return 0 if rows else 1


if __name__ == "__main__":
    sys.exit(main())
