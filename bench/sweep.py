"""A batch sweep through the service, as a user runs one: start `fuseforge run` on a fresh data
folder, upload a ResNet-50-style and a BERT-style model generated in code (random weights,
batch dimension left free), start a job on each with `benchmark.batch_sizes`, and print the
records: the headline (engine against the original at ONNX Runtime's default level, with its
95% interval and verdict) and one row per batch and variant. The jobs' SVG plots are saved to
--out.

    .venv/bin/python -m bench.sweep --out /tmp/sweep [--resnet-batches 1,2,4] [--bert-batches 1,4,16]

Every figure is measured interleaved in one worker process; the machine's other load shows up
in the intervals, not in the ratios' bias.
"""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import onnx

from bench.service.stack import free_port, fuseforge_env, start_fuseforge, stop, wait_healthy
from core.db.models import BenchmarkSuite, BenchmarkVariant
from fuseforge_client import FuseForgeClient
from optimizer.testing.real_models import bert_encoder, resnet50

__all__ = ["main"]

_BERT_SEQ = 128


def _free_batch(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model` with dimension 0 of its inputs and outputs named "N" where it was written -1
    (bert_encoder(batch=-1) reshapes with -1, so any batch runs)."""
    for value in (*model.graph.input, *model.graph.output, *model.graph.value_info):
        dims = value.type.tensor_type.shape.dim
        if dims and dims[0].HasField("dim_value") and dims[0].dim_value == -1:
            dims[0].ClearField("dim_value")
            dims[0].dim_param = "N"
    return model


def _models() -> dict[str, tuple[onnx.ModelProto, dict[str, list[int]]]]:
    return {
        "resnet50": (resnet50(batch="N"), {"input": [1, 3, 224, 224]}),
        "bert-base-2layer": (
            _free_batch(bert_encoder(batch=-1, layers=2, hidden=256, heads=4, seq=_BERT_SEQ)),
            {"input_ids": [1, _BERT_SEQ], "attention_mask": [1, 1, 1, _BERT_SEQ]}),
    }


def _ci(low: float | None, high: float | None, digits: int = 2) -> str:
    return "–" if low is None or high is None else f"{low:.{digits}f}–{high:.{digits}f}"


def _table(records: Sequence[Mapping[str, Any]]) -> list[str]:
    lines = ["| batch | variant | p50 ms (95% CI) | throughput /s | peak MB | speed-up (95% CI) | verdict |",
             "|---|---|---|---|---|---|---|"]
    for r in sorted(records, key=lambda r: (r["batch_size"], r["variant"] != BenchmarkVariant.ORIGINAL)):
        memory = "–" if r["peak_memory_mb"] is None else f"{r['peak_memory_mb']:.0f}"
        speedup = ("–" if r["speedup_vs_reference"] is None else
                   f"{r['speedup_vs_reference']:.2f}× ({_ci(r['speedup_ci_low'], r['speedup_ci_high'])})")
        lines.append(
            f"| {r['batch_size']} | {r['variant']} | {r['latency_ms_p50']:.2f} "
            f"({_ci(r['latency_ms_p50_ci_low'], r['latency_ms_p50_ci_high'])}) | "
            f"{r['throughput_per_s']:.1f} | {memory} | {speedup} | {r['speedup_verdict'] or '–'} |")
    return lines


def _suite_table(records: Sequence[Mapping[str, Any]], suite: BenchmarkSuite) -> list[str]:
    return _table([r for r in records if r["suite"] == suite])


def _report(name: str, job: Mapping[str, Any]) -> list[str]:
    records = job["benchmarks"]
    head = next(r for r in records if r["suite"] == BenchmarkSuite.COMPARISON
                and r["variant"] == BenchmarkVariant.ENGINE)
    env = head.get("environment") or {}
    lines = [f"## {name}: job {job['id']} {job['status']}",
             f"headline: engine {head['speedup_vs_reference']:.2f}× the original at ORT's default "
             f"level (95% CI {_ci(head['speedup_ci_low'], head['speedup_ci_high'])}, "
             f"{head['iterations']} rounds): {head['speedup_verdict']}",
             f"environment: {env.get('cpu')} ({env.get('cpu_cores')} cores), onnxruntime "
             f"{env.get('onnxruntime')}, memory bandwidth {env.get('memory_bandwidth_gb_s')} GB/s; "
             f"engine at {head['achieved_gb_s'] or 0:.2f} GB/s "
             f"({(head['bandwidth_fraction'] or 0) * 100:.1f}% of it)",
             "", "comparison:", *_suite_table(records, BenchmarkSuite.COMPARISON),
             "", "sweep:", *_suite_table(records, BenchmarkSuite.SWEEP)]
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for the plots and models")
    parser.add_argument("--resnet-batches", default="1,2,4")
    parser.add_argument("--bert-batches", default="1,4,16")
    parser.add_argument("--iterations", type=int, default=30)
    parser.add_argument("--only", choices=["resnet50", "bert-base-2layer"])
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    batches = {"resnet50": args.resnet_batches, "bert-base-2layer": args.bert_batches}
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="fuseforge-sweep-") as tmp:
        server = start_fuseforge("run", fuseforge_env(Path(tmp) / "data", port), args.out / "run.log")
        try:
            base_url = f"http://127.0.0.1:{port}"
            wait_healthy(f"{base_url}/healthz", server)
            with FuseForgeClient(base_url) as client:
                for name, (model, shapes) in _models().items():
                    if args.only and name != args.only:
                        continue
                    path = args.out / f"{name}.onnx"
                    onnx.save(model, path)
                    uploaded = client.upload_model(path)
                    sizes = [int(b) for b in batches[name].split(",")]
                    submitted = client.submit_job(uploaded.id, input_shapes=shapes, benchmark={
                        "batch_sizes": sizes, "iterations": args.iterations})
                    job = client.wait(submitted.id, timeout_s=3600)
                    client.download_artifacts(job, args.out / name, names=[
                        a.name for a in job.artifacts if a.name.endswith(".svg")])
                    print("\n".join(_report(name, job.data)), flush=True)
        finally:
            stop(server)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
