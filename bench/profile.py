"""Per-node profiles through the service, as a user gets them: start `fuseforge run` on a fresh
data folder, upload a ResNet-50-style and a BERT-style model generated in code and the model-zoo
networks the `onnx` package ships (real exports, opset 9, many nodes unnamed), run a job on
each, and print what its profile report says: how much of the measured latency the corrected
node times account for (original and engine), how many engine nodes map back to original nodes,
the memory-bound share, and the biggest hot spot; and the engine's speed-up over `original`
and over `original_unoptimized` from the job's benchmark (timed in the same rounds).
report.html of each job is saved to --out.

    .venv/bin/python -m bench.profile --out /tmp/profile [--only resnet50,light_squeezenet]

The issue's bar: node times within 15% of the latency, every engine node mapped.
"""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import onnx

from bench.service.stack import free_port, fuseforge_env, start_fuseforge, stop, wait_healthy
from fuseforge_client import FuseForgeClient, JobError
from optimizer.testing.real_models import bert_encoder, resnet50

__all__ = ["main"]

_LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
_BERT_SEQ = 128


def _models() -> dict[str, tuple[onnx.ModelProto, dict[str, list[int]] | None]]:
    models: dict[str, tuple[onnx.ModelProto, dict[str, list[int]] | None]] = {
        "resnet50": (resnet50(batch=1), None),
        "bert-2layer": (bert_encoder(layers=2, hidden=256, heads=4, seq=_BERT_SEQ), None),
    }
    for path in sorted(_LIGHT.glob("light_*.onnx")):
        models[path.stem] = (onnx.load(path), None)
    return models


def _speedups(job: Mapping[str, Any]) -> str:
    """The engine's speed-up over `original` (ONNX Runtime's default level) and over
    `original_unoptimized` (every ORT optimization off), from the job's comparison records,
    timed in the same interleaved rounds."""
    p50 = {record["variant"]: record["latency_ms_p50"] for record in job.get("benchmarks") or ()
           if record.get("suite") == "comparison"}
    if "engine" not in p50:
        return "– | –"
    return " | ".join(f"{p50[variant] / p50['engine']:.2f}x" if variant in p50 else "–"
                      for variant in ("original", "original_unoptimized"))


def _row(name: str, job: Mapping[str, Any]) -> str:
    profile = job.get("profile_report") or {}
    if not profile.get("engine"):
        why = profile.get("skipped") or (job.get("error") or {}).get("message") or job["status"]
        return f"| {name} | – | – | – | – | – | – | – | {why} |"
    original, engine = profile["original"], profile["engine"]
    mapping, bound = profile["mapping"], profile["memory_bound"]
    share = "–" if bound["share"] is None else f"{bound['share']:.0%}"
    return (f"| {name} | {original['coverage']:.2f} ({original['latency_ms']:.2f} ms) | "
            f"{engine['coverage']:.2f} ({engine['latency_ms']:.2f} ms) | "
            f"{mapping['engine_nodes_mapped']}/{mapping['engine_nodes']} | "
            f"{mapping['original_nodes_reached']}/{mapping['original_nodes']} | {share} | "
            f"{_speedups(job)} | {profile['hot_spot']} |")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for the reports")
    parser.add_argument("--only", help="comma-separated model names")
    parser.add_argument("--iterations", type=int, default=20)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    wanted = set(args.only.split(",")) if args.only else None
    port = free_port()
    print("| model | original: node sum / latency | engine: node sum / latency | engine nodes "
          "mapped | original nodes reached | memory-bound | engine vs original | engine vs "
          "original_unoptimized | biggest hot spot |")
    print("|---|---|---|---|---|---|---|---|---|", flush=True)
    with tempfile.TemporaryDirectory(prefix="fuseforge-profile-") as tmp:
        server = start_fuseforge("run", fuseforge_env(Path(tmp) / "data", port),
                                 args.out / "run.log")
        try:
            base_url = f"http://127.0.0.1:{port}"
            wait_healthy(f"{base_url}/healthz", server)
            with FuseForgeClient(base_url) as client:
                for name, (model, shapes) in _models().items():
                    if wanted and name not in wanted:
                        continue
                    path = Path(tmp) / f"{name}.onnx"
                    onnx.save(model, path)
                    uploaded = client.upload_model(path)
                    fields: dict[str, Any] = {"benchmark": {"iterations": args.iterations}}
                    if shapes:
                        fields["input_shapes"] = shapes
                    submitted = client.submit_job(uploaded.id, **fields)
                    try:
                        job = client.wait(submitted.id, timeout_s=3600)
                    except JobError as err:  # the table says how it ended
                        print(_row(name, err.job.data), flush=True)
                        continue
                    client.download_artifacts(job, args.out / name, names=["report.html"])
                    print(_row(name, job.data), flush=True)
        finally:
            stop(server)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
