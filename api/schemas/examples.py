"""The examples the OpenAPI document shows, telling one story: project `ci` uploads a ResNet
block and a validation set, and runs an onnxruntime job on it that succeeds and posts its
webhook. Values are what the API answered for such a run (ids, hashes and timings shortened to
fixed ones), so a client written against them meets the same shapes.

tests/api/http/test_openapi_examples.py checks each against its schema and its pydantic model.
"""

from typing import Any

from core.db.models import BenchmarkSuite, BenchmarkVariant
from core.job_config import JobConfig

__all__ = [
    "CALLBACK_URL",
    "DATASET",
    "HEALTH",
    "JOB",
    "JOB_CREATE",
    "JOB_SUMMARIES",
    "MODEL",
    "PROJECT",
    "WORKER",
    "page",
]

PROJECT_ID = "0b6f6a8e-3c1d-4c52-9d0a-4be1f1f3c2a7"
MODEL_ID = "e3bddc0a-eb3c-4eda-9706-20bbcdb90d3a"
DATASET_ID = "4f7041bb-80c2-424d-833d-ac8b0d70bec5"
JOB_ID = "bbf038f8-ee58-4b01-aaa3-61d765c56c90"
CALLBACK_URL = "https://hooks.example.com/fuseforge"

PROJECT: dict[str, Any] = {
    "id": PROJECT_ID,
    "name": "ci",
    "created_at": "2026-12-01T22:15:07.118305Z",
    "default_callback_url": CALLBACK_URL,
}

MODEL: dict[str, Any] = {
    "id": MODEL_ID,
    "name": "resnet-block.onnx",
    "sha256": "c554fb84cb4d363a6652e0cce992a3004a870ef82e673943c66fa97bfbad003b",
    "size_bytes": 4740,
    "ir_version": 10,
    "opset": 17,
    "producer": "pytorch 2.5.1",
    "inputs": [{"name": "input", "dtype": "float32", "shape": ["N", 3, 32, 32]}],
    "outputs": [{"name": "logits", "dtype": "float32", "shape": ["N", 10]}],
    "warnings": [],
    "external_data": None,  # uploaded as one .onnx file, not a tar with its data files
    "created_at": "2026-12-01T22:28:41.703108Z",
    "job_count": 3,
}

DATASET: dict[str, Any] = {
    "id": DATASET_ID,
    "name": "val.npz",
    "sha256": "cdf3847bc57af88ab5e260d53911b6caf31d0fe72513f528f4b5d96de74a1094",
    "size_bytes": 49692,
    "samples": 4,
    "arrays": [{"name": "input", "dtype": "float32", "shape": [1, 3, 32, 32],
                "min": -4.18, "max": 4.37}],
    "role": "validation",
    "has_labels": True,
    "created_at": "2026-12-01T22:29:12.753915Z",
}

# Request bodies of POST /v1/jobs: the least, a validated CPU job, a TensorRT fp16 job, an int8
# job, a search job (its candidates raced, the winner shipped: search_report below).
JOB_CREATE: list[dict[str, Any]] = [
    {"model_id": MODEL_ID},
    {
        "model_id": MODEL_ID,
        "backend": "onnxruntime",
        "precision": "fp32",
        "input_shapes": {"input": [1, 3, 32, 32]},
        "dataset_id": DATASET_ID,
        "validation": {"atol": 1e-4, "rtol": 1e-3},
        "benchmark": {"warmup": 5, "iterations": 30, "measure_memory": True,
                      "batch_sizes": [1, 8]},
        "callback_url": CALLBACK_URL,
    },
    {
        "model_id": MODEL_ID,
        "backend": "tensorrt",
        "target_gpu": "9.0",
        "precision": "fp16",
        "profiles": {"input": {"min": [1, 3, 32, 32], "opt": [8, 3, 32, 32],
                               "max": [32, 3, 32, 32]}},
        "precision_search": True,
        "accuracy_budget": {"min_cosine": 0.999},
    },
    {
        "model_id": MODEL_ID,
        "precision": "int8",
        "quantization": {"mode": "static", "calibration": DATASET_ID, "method": "auto"},
        "accuracy_budget": {"min_cosine": 0.99, "min_top1_agreement": 0.99},
    },
    {
        "model_id": MODEL_ID,
        "input_shapes": {"input": [1, 3, 32, 32]},
        "dataset_id": DATASET_ID,
        "search": {"strategy": "min_latency", "time_budget_s": 120},
    },
]

# As stored: every field, defaults filled in.
_CONFIG = JobConfig.model_validate(
    {k: v for k, v in JOB_CREATE[1].items() if k != "model_id"}).model_dump(mode="json")

_STARTED, _FINISHED = "2026-12-01T22:30:01.049674Z", "2026-12-01T22:30:03.702585Z"

_SUCCEEDED: dict[str, Any] = {
    "id": JOB_ID,
    "model_id": MODEL_ID,
    "model_name": MODEL["name"],
    "backend": "onnxruntime",
    "precision": "fp32",
    "status": "succeeded",
    "stage": "done",
    "progress": 1.0,
    "error": None,
    "status_detail": None,
    "speedup": 1.419,  # the engine benchmark's speedup_vs_reference, below
    "speedup_ci_low": round(1.419 * 0.97, 3),  # and its interval and verdict
    "speedup_ci_high": round(1.419 * 1.03, 3),
    "speedup_verdict": "faster",
    "regression": None,  # the engine benchmark's, below
    "validation_passed": True,
    # core/outcome.py: what was asked and shipped, the verdicts, and the headline
    "outcome": {
        "asked": {"backend": "onnxruntime", "precision": "fp32", "mode": None, "passes": "all",
                  "search": False},
        "shipped": {"what": "engine", "backend": "onnxruntime", "precision": "fp32",
                    "passes": ["cleanup", "fold_batch_norm", "fuse_conv_add_relu",
                               "fuse_conv_activation", "fuse_matmul_add"],
                    "label": "onnxruntime fp32 engine"},
        "speedup": {"value": 1.419, "ci_low": round(1.419 * 0.97, 3),
                    "ci_high": round(1.419 * 1.03, 3), "verdict": "faster"},
        "accuracy": {"verdict": "passed", "worst": {
            "output": "logits", "metric": "cosine_similarity", "value": 0.9999999,
            "limit": 0.9999, "text": "logits: cosine similarity 1.00000 (limit 0.9999)"}},
        "why": None,
        "headline": "Shipped the onnxruntime fp32 engine: 1.42x faster (1.38-1.46), accuracy "
                    "passed.",
    },
    "created_at": "2026-12-01T22:30:00.799382Z",
    "started_at": _STARTED,
    "finished_at": _FINISHED,
    "duration_s": 2.652911,
}
_UNFINISHED: dict[str, Any] = {"speedup": None, "speedup_ci_low": None, "speedup_ci_high": None,
                               "speedup_verdict": None, "validation_passed": None,
                               "outcome": None, "finished_at": None, "duration_s": None}


def _artifact(name: str, kind: str, size: int, sha256: str) -> dict[str, Any]:
    return {"name": name, "kind": kind, "size_bytes": size, "sha256": sha256,
            "url": f"/v1/jobs/{JOB_ID}/artifacts/{name}", "expired_at": None}


# Where a benchmark record was measured (optimizer/measure/environment.py captures it on the worker).
ENVIRONMENT: dict[str, Any] = {
    "cpu": "AMD EPYC 9654 96-Core Processor", "cpu_cores": 2, "threads": 1, "memory_gib": 23.4,
    "os": "Linux-6.1.0-x86_64-with-glibc2.36", "python": "3.11.2", "onnxruntime": "1.23.2",
    "onnx": "1.19.1", "tensorrt": None, "cuda": None, "driver": None, "gpu": None,
    "gpu_sm_clock_mhz": None, "gpu_memory_clock_mhz": None, "worker": "vm:15420",
    "memory_bandwidth_gb_s": 11.8,
}


def _benchmark(variant: str, p50: float, p90: float, p99: float, mean: float,
               speedup: float | None, *, suite: str = BenchmarkSuite.COMPARISON, batch: int = 1
               ) -> dict[str, Any]:
    verdict = None if speedup is None else "faster" if speedup > 1 else "slower"
    return {"suite": suite, "variant": variant, "backend": "onnxruntime", "batch_size": batch,
            "iterations": 30, "warmup": 5, "latency_ms_p50": p50, "latency_ms_p90": p90,
            "latency_ms_p99": p99, "latency_ms_mean": mean, "throughput_per_s": batch * 1000 / mean,
            "peak_memory_mb": 41.3 if variant == BenchmarkVariant.ORIGINAL else 38.9,
            "speedup_vs_reference": speedup, "slower_than_previous": None,
            "timing": "host_clock", "device_memory_mb": None,
            "speedup_ci_low": None if speedup is None else round(speedup * 0.97, 3),
            "speedup_ci_high": None if speedup is None else round(speedup * 1.03, 3),
            "speedup_verdict": verdict,
            "latency_ms_p50_ci_low": round(p50 * 0.98, 3), "latency_ms_p50_ci_high": round(p50 * 1.02, 3),
            "latencies_ms": [p50, p90, p50, p99], "warmup_cv": 0.021, "warmup_stable": True,
            "environment": ENVIRONMENT, "environment_key": "5f0c2a9e41d7b3a8",
            "config_key": "c93e1b07a4d2f611", "bytes_per_inference": 4_825_088,
            "achieved_gb_s": round(4.825088 / p50, 2), "bandwidth_fraction": round(4.825088 / p50 / 11.8, 3),
            "regression": None}


def _search_row(name: str, outcome: str, reason: str | None, p50: float,
                p50_ci: tuple[float, float], speedup: float, speedup_ci: tuple[float, float], *,
                cosine: float, engine_bytes: int, pareto: bool) -> dict[str, Any]:
    """A raced fp32 candidate of the search report (optimizer/search/decision.py's row)."""
    passes: Any = "all" if name == "fp32/all" else "none" if name == "fp32/none" else [
        "cleanup", "fold_batch_norm", "fuse_conv_activation", "fuse_matmul_add"]
    return {"name": name, "outcome": outcome, "reason": reason,
            "recipe": {"precision": "fp32", "passes": passes, "ort_optimization_level": "all"},
            "precision": "fp32",
            "accuracy": {"cosine": cosine, "max_abs_err": 2.384e-07, "top1_agreement": 1.0},
            "engine_bytes": engine_bytes, "build_s": 0.021, "rounds": 30, "latency_ms_p50": p50,
            "latency_ms_p50_ci": list(p50_ci), "latency_ms_p99": round(p50 * 1.07, 4),
            "throughput_per_s": round(1000 / p50, 1), "speedup": speedup,
            "speedup_ci": list(speedup_ci), "out": reason if outcome == "slower" else None,
            "pareto": pareto}


JOB: dict[str, Any] = {
    **_SUCCEEDED,
    "config": _CONFIG,
    "worker": "cpu-host-1:19337",
    "attempts": 1,
    "artifacts": [
        _artifact("engine.onnx", "engine", 4591,
                  "1d0177c912c82c3972746dee05e47bf31b4663112457ed3c15df20a3f383e300"),
        _artifact("fused.onnx", "optimized_model", 4749,
                  "1de88f2186d9b49aa322f59a89ff1502f05ef84edbc89bff41c9744be0061a32"),
        _artifact("fusion_report.json", "report", 6178,
                  "619423d5cde6268c03a45b7abb69dfdce30b19fa8ed861f9626ab27bcf185e95"),
        _artifact("manifest.json", "manifest", 1124,
                  "dd50c41a2108823cf2482c734f2f89fcf6fc91be9f09ae1bddcf69274e012d4c"),
    ],
    "fusion_report": {
        "backend": "onnxruntime",
        "passes_run": ["cleanup", "fold_batch_norm", "fuse_conv_add_relu",
                       "fuse_conv_activation", "fuse_matmul_add"],
        "passes_skipped": {"fuse_to_plugins": "no onnxruntime lowering (the backend handles "
                                              "this pattern itself or has no fused form)"},
        "nodes_before": 10,
        "nodes_after": 5,
        "ops_before": {"Add": 1, "BatchNormalization": 2, "Conv": 2, "Flatten": 1, "Gemm": 1,
                       "GlobalAveragePool": 1, "Relu": 2},
        "ops_after": {"Flatten": 1, "Gemm": 1, "GlobalAveragePool": 1,
                      "com.microsoft.FusedConv": 2},
        "rules": [
            {"pass_name": "fold_batch_norm", "rule": "FoldBatchNormIntoConv", "applied": 2,
             "refusals": []},
            {"pass_name": "fuse_conv_add_relu", "rule": "FuseConvAddRelu", "applied": 1,
             "refusals": []},
            {"pass_name": "fuse_conv_activation", "rule": "FuseConvRelu", "applied": 1,
             "refusals": []},
        ],
        "iterations": 2,
        "duration_s": 0.021,
        "notes": [],
        "excluded_rules": [],
    },
    "accuracy_report": {
        **dict.fromkeys(("precision", "precision_search", "quantization",
                         "precision_evaluation", "bisection",
                         "blame", "localization", "fallback", "original_shipped",
                         "larger_shape_check", "profile_checks")),
        "passed_first_time": True,
        "tolerances": {"atol": 0.0001, "rtol": 0.001, "min_cosine": 0.9999},
        "failures": [],
        "input_shapes": [{"input_shapes": {"input": [1, 3, 32, 32]}, "samples": 4,
                          "passed": True}],
        "input_ranges": {},
    },
    "engine_report": None,
    "profile_report": {
        "profiler": "ONNX Runtime's profiler, 10 runs, default intra-op threads",
        "input_shapes": {"input": [1, 3, 32, 32]},
        "original": {"latency_ms": 0.127, "profiled_run_ms": 0.15, "node_sum_ms": 0.115,
                     "coverage": 0.906, "outside_nodes_ms": 0.012, "nodes": 7, "runs": 10},
        "engine": {"latency_ms": 0.125, "profiled_run_ms": 0.154, "node_sum_ms": 0.112,
                   "coverage": 0.896, "outside_nodes_ms": 0.013, "nodes": 7, "runs": 10},
        "by_op_type": [{"op_type": "Conv", "original_ms": 0.0795, "engine_ms": 0.0776},
                       {"op_type": "ReorderOutput", "original_ms": 0.0195, "engine_ms": 0.0206}],
        "top_nodes": [{"node": "r2_nchwc", "op_type": "Conv", "time_ms": 0.0508, "share": 0.4745,
                       "calls": 1, "bytes_moved": 332352, "achieved_gb_s": 6.54,
                       "memory_bound": False, "from": ["conv2", "bn2", "residual", "relu2"],
                       "from_op_types": ["Add", "BatchNormalization", "Conv", "Relu"]}],
        "unfused": [{"node": "pool", "op_type": "GlobalAveragePool", "original_ms": 0.0047,
                     "engine_ms": 0.0088, "refusal": None}],
        "in_float": [],
        "memory_bound": {"bandwidth_gb_s": 11.2, "threshold": 0.5, "nodes": 2,
                         "time_ms": 0.0206, "share": 0.184},
        "mapping": {"engine_nodes": 7, "engine_nodes_mapped": 7, "unmapped": [],
                    "original_nodes": 10, "original_nodes_reached": 10},
        "hot_spot": "r2_nchwc (Conv) takes 0.0508 ms, 47% of the engine's node time "
                    "(0.125 ms a run), from 4 original node(s): conv2, bn2, residual, relu2",
        "skipped": None,
    },
    # Null unless the job searched (JOB_CREATE's search job); filled here to show its shape.
    # Raced rows carry the race's timings, a refused one only its name, outcome and reason.
    "search_report": {
        "strategy": "min_latency",
        "winner": "fp32/all",
        "why": "fastest: every other candidate was slower beyond its interval or out; 0.069 ms "
               "p50, 1.419x the original (95% interval 1.376-1.462)",
        "recipe": {"input_shapes": {"input": [1, 3, 32, 32]}, "dataset_id": DATASET_ID,
                   "precision": "fp32", "passes": "all", "ort_optimization_level": "all"},
        "rows": [
            _search_row("fp32/all", "won", None, 0.069, (0.0676, 0.0705), 1.419, (1.376, 1.462),
                        cosine=0.9999999999999972, engine_bytes=4591, pareto=True),
            _search_row("fp32/without-fuse_conv_add_relu", "slower",
                        "slower than fp32/all beyond its interval: 1.029x its time (95% "
                        "interval 1.011-1.047)", 0.071, (0.0695, 0.0728), 1.379, (1.341, 1.418),
                        cosine=0.9999999999999972, engine_bytes=4697, pareto=False),
            _search_row("fp32/none", "slower",
                        "slower than fp32/all beyond its interval: 1.322x its time (95% "
                        "interval 1.281-1.366)", 0.0912, (0.0897, 0.0931), 1.02, (0.99, 1.05),
                        cosine=1.0, engine_bytes=4740, pareto=True),
            {"name": "int8-dynamic/all", "outcome": "slower",
             "reason": "the fp32 model would ship: int8 (dynamic) ran at 1.078x [0.928, 1.144] "
                       "the fp32 model's time: not faster beyond its interval, so the fp32 "
                       "model ships",
             "recipe": {"precision": "int8", "passes": "all", "quantization": {"mode": "dynamic"},
                        "ort_optimization_level": "all"},
             "precision": "int8", "accuracy": {}, "engine_bytes": None, "build_s": None,
             "pareto": False},
            {"name": "int8-static", "outcome": "refused",
             "reason": "static quantization needs a calibration dataset "
                       "(quantization.calibration); FuseForge never calibrates on random inputs",
             "pareto": False},
        ],
        "race": {"rounds": 30, "stopped": "rounds done"},
        # null: a candidate beat the original (else why the original shipped instead)
        "original": None,
        # null: one backend searched (else each backend's fastest raced candidate)
        "backends": None,
        "resumed": [],
        "time_budget_s": 120.0,
        "elapsed_s": 3.2,
    },
    "validation": {
        "passed": True,
        "outputs": [{
            "name": "logits", "samples": 4, "max_abs_err": 2.384e-07, "max_rel_err": 7.641e-07,
            "mean_abs_err": 8.121e-08, "cosine_similarity": 0.9999999999999972, "atol": 0.0001,
            "rtol": 0.001, "min_cosine": 0.9999, "passed": True,
            "metrics": {"rmse": 1.132e-07, "snr_db": 142.2, "abs_err_p50": 5.96e-08,
                        "abs_err_p90": 2.384e-07, "abs_err_p99": 2.384e-07,
                        "top1_agreement": 1.0, "top5_agreement": 1.0,
                        "reference_accuracy": 0.75, "candidate_accuracy": 0.75,
                        "accuracy_drop": 0.0},
        }],
    },
    "benchmarks": [
        # "original": the model at ONNX Runtime's default level, what its user runs today
        _benchmark(BenchmarkVariant.ORIGINAL, 0.093, 0.104, 0.108, 0.0963, None),
        _benchmark(BenchmarkVariant.ORIGINAL_UNOPTIMIZED, 0.131, 0.139, 0.142, 0.133, 0.71),
        _benchmark(BenchmarkVariant.ENGINE, 0.069, 0.073, 0.074, 0.068, 1.419),
        _benchmark(BenchmarkVariant.ORIGINAL, 0.093, 0.104, 0.108, 0.0963, None,
                   suite=BenchmarkSuite.SWEEP),
        _benchmark(BenchmarkVariant.ENGINE, 0.069, 0.073, 0.074, 0.068, 1.419,
                   suite=BenchmarkSuite.SWEEP),
        _benchmark(BenchmarkVariant.ORIGINAL, 0.412, 0.436, 0.45, 0.419, None,
                   suite=BenchmarkSuite.SWEEP, batch=8),
        _benchmark(BenchmarkVariant.ENGINE, 0.301, 0.318, 0.322, 0.305, 1.369,
                   suite=BenchmarkSuite.SWEEP, batch=8),
    ],
    "events": [
        {"stage": None, "message": "queued", "created_at": "2026-12-01T22:30:00.801429Z"},
        {"stage": None, "message": "claimed by worker cpu-host-1:19337",
         "created_at": "2026-12-01T22:30:00.908700Z"},
        *({"stage": stage, "message": f"stage {stage} started", "created_at": at} for stage, at in (
            ("load", "2026-12-01T22:30:01.380334Z"),
            ("optimize", "2026-12-01T22:30:01.405335Z"),
            ("build_engine", "2026-12-01T22:30:01.428075Z"),
            ("validate", "2026-12-01T22:30:01.436794Z"),
            ("benchmark", "2026-12-01T22:30:02.462402Z"),
            ("store", "2026-12-01T22:30:03.489656Z"))),
        {"stage": "done", "message": "succeeded", "created_at": "2026-12-01T22:30:03.704981Z"},
    ],
    "stage_seconds": {"load": 0.025001, "optimize": 0.02274, "build_engine": 0.008719,
                      "validate": 1.025608, "benchmark": 1.027254, "store": 0.212929},
    "stage_memory": {
        "peak_rss_mb": {"load": 312.4, "optimize": 318.9, "build_engine": 305.2,
                        "validate": 341.7, "benchmark": 322.0, "store": 301.6},
        "method": "VmHWM of the job's process, reset as each stage starts"},
    "webhook_deliveries": [{
        "attempt": 1, "event": "job.succeeded", "status_code": 200, "error": None,
        "duration_ms": 41.7, "at": "2026-12-01T22:30:03.812044Z",
    }],
}

# GET /v1/jobs: the job above, one running, one queued for a GPU no online worker has.
JOB_SUMMARIES: list[dict[str, Any]] = [
    {**_SUCCEEDED, **_UNFINISHED, "id": "5d1c9a2e-7f3b-4e8a-b6d4-2c9e0f1a3b57",
     "backend": "tensorrt", "precision": "fp16", "status": "queued", "stage": None,
     "progress": 0.0, "started_at": None,
     "created_at": "2026-12-01T22:31:40.220119Z",
     "status_detail": "waiting for a worker: no online worker has a GPU of compute capability "
                      "9.0 with TensorRT (queue 'gpu.sm90'); no GPU worker is online. The job "
                      "stays queued until one starts (`fuseforge worker --queues gpu` on a "
                      "machine with that GPU)."},
    {**_SUCCEEDED, **_UNFINISHED, "id": "a8e2f4c1-0b9d-4d3e-9f5a-6c7b8d9e0f12",
     "status": "running", "stage": "validate", "progress": 0.6,
     "created_at": "2026-12-01T22:31:02.004512Z", "started_at": "2026-12-01T22:31:02.310877Z"},
    _SUCCEEDED,
]

WORKER: dict[str, Any] = {
    "name": "celery@gpu-host-1",
    "hostname": "gpu-host-1",
    "pid": 4121,
    "queues": ["gpu", "gpu.sm90", "gpu.h200", "webhooks"],
    "online": True,
    "gpu_name": "NVIDIA H200",
    "compute_capability": "9.0",
    "gpu_memory_mib": 143771,
    "tensorrt_version": "10.16.0",
    "capabilities": {
        "gpus": [{"index": 0, "name": "NVIDIA H200", "compute_capability": "9.0",
                  "memory_total_mib": 143771,
                  "uuid": "GPU-5b0e7c4a-9d21-4f3c-8a6e-1f2d3c4b5a69",
                  "driver_version": "570.124.06"}],
        "tensorrt_version": "10.16.0",
        "notes": [],
    },
    "started_at": "2026-12-01T21:02:11.503120Z",
    "heartbeat_at": "2026-12-01T22:31:40.114082Z",
    "stopped_at": None,
}

HEALTH: dict[str, Any] = {
    "status": "ok",
    "database": {"ok": True, "error": None},
    "broker": {"ok": True, "error": None},
    "disk": {"ok": True, "error": None, "path": "/var/lib/fuseforge", "free_bytes": 82591465472,
             "min_free_bytes": 1073741824},
    "storage": {"ok": True, "error": None, "store": "bucket 'fuseforge' at http://objectstore:8333"},
}


def page(items: list[dict[str, Any]]) -> dict[str, Any]:
    """A first page of a listing holding `items`."""
    return {"items": items, "total": len(items), "limit": 50, "offset": 0}


def _history_entry(job_id: str, at: str, p50: float, onnxruntime: str,
                   differences: list[str], regression: dict[str, Any] | None) -> dict[str, Any]:
    speedup = round(0.093 / p50, 3)
    return {"job_id": job_id, "created_at": at, "suite": BenchmarkSuite.COMPARISON,
            "variant": BenchmarkVariant.ENGINE,
            "batch_size": 1, "latency_ms_p50": p50, "latency_ms_p50_ci_low": round(p50 * 0.98, 3),
            "latency_ms_p50_ci_high": round(p50 * 1.02, 3), "throughput_per_s": round(1000 / p50, 1),
            "speedup_vs_reference": speedup, "speedup_ci_low": round(speedup * 0.97, 3),
            "speedup_ci_high": round(speedup * 1.03, 3), "speedup_verdict": "faster",
            "environment_key": "5f0c2a9e41d7b3a8" if onnxruntime == "1.23.2" else "81d4be0c5a9f2e37",
            "environment": {**ENVIRONMENT, "onnxruntime": onnxruntime},
            "environment_differences": differences, "regression": regression}


_EARLIER_JOB_ID = "6a4f0d2c-1e8b-4c7a-9f3d-5b2e8a1c0d94"

# GET /v1/models/{id}/benchmarks: one configuration, measured in three jobs; the latest is
# slower than the best earlier one in its environment, the oldest ran an older ONNX Runtime.
BENCHMARK_HISTORY: dict[str, Any] = page([{
    "config_key": "c93e1b07a4d2f611",
    "config": {"backend": "onnxruntime", "precision": "fp32", "quantization_mode": None,
               "target_gpu": None,
               "passes": "all", "input_shapes": {"input": [1, 3, 32, 32]}, "profiles": None,
               "batch_size": 1},
    "entries": [
        _history_entry(JOB_ID, "2026-12-01T22:30:03.690002Z", 0.081, "1.23.2", [], {
            "against_job": _EARLIER_JOB_ID, "speedup": 1.148, "speedup_ci": [1.114, 1.183],
            "against_speedup": 1.348, "against_speedup_ci": [1.307, 1.388],
            "latency_ms_p50": 0.081, "against_latency_ms_p50": 0.069, "slowdown": 1.174,
            "detail": f"engine 1.15× the original's speed (1.11–1.18) vs 1.35× (1.31–1.39) in "
                      f"job {_EARLIER_JOB_ID}, each against the original timed in its own run: "
                      f"1.17× slower"}),
        _history_entry(_EARLIER_JOB_ID, "2026-11-30T09:12:44.120511Z", 0.069, "1.23.2", [], None),
        _history_entry("0c7e5a3b-9d2f-4b1e-8a6c-3f5d7e9b1a20", "2026-11-20T16:05:10.553087Z",
                       0.074, "1.22.0", ["onnxruntime 1.22.0 vs 1.23.2"], None),
    ],
}])
