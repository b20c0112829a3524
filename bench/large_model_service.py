"""bench/large_model.py's --service run: the model uploaded to `fuseforge run` with its data
file, then a job on it; the API's memory over the upload and the job's per stage."""

from __future__ import annotations

import time
from pathlib import Path

from bench.service.stack import free_port, fuseforge_env, start_fuseforge, stop, wait_healthy
from fuseforge_client import FuseForgeClient, JobError

__all__ = ["through_service"]

_MB = 2**20
_JOB = {"backend": "onnxruntime", "precision": "fp32",
        "benchmark": {"warmup": 1, "iterations": 5, "measure_memory": False},
        "validation": {"samples": 2}}


def _status_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def _api_pid(run_pid: int) -> int:
    """The API process `fuseforge run` started (its child running `serve`)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            command = (entry / "cmdline").read_bytes().split(b"\0")
        except (OSError, IndexError, ValueError):
            continue
        if parent == run_pid and b"serve" in command:
            return int(entry.name)
    raise SystemExit("fuseforge run started no API process")


def through_service(folder: Path, model: Path, weights: int, hidden: int) -> None:
    port = free_port()
    env = fuseforge_env(folder / "data", port, FUSEFORGE_MAX_UPLOAD_BYTES=str(16 * 2**30),
                        FUSEFORGE_LOG_LEVEL="WARNING")
    service = start_fuseforge("run", env, folder / "run.log")
    base_url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(f"{base_url}/healthz", service, timeout_s=300)
        api = _api_pid(service.pid)
        with FuseForgeClient(base_url, api_key="", timeout_s=3600) as client:
            Path(f"/proc/{api}/clear_refs").write_text("5")  # the peak (VmHWM) starts at now
            before = _status_kib(api, "VmRSS")
            started = time.perf_counter()
            uploaded = client.upload_model(model, data_files=["model.onnx.data"])
            upload_s = time.perf_counter() - started
            growth = (_status_kib(api, "VmHWM") - before) / 1024
            print(f"upload: {uploaded.size_bytes / _MB:,.0f} MB tar in {upload_s:.0f} s "
                  f"({uploaded.size_bytes / _MB / upload_s:.0f} MB/s); API peak RSS growth "
                  f"{growth:+.1f} MB (target < 100 MB)", flush=True)
            started = time.perf_counter()
            job = client.submit_job(uploaded.id, _JOB,
                                    input_shapes={"input": [1, 8, hidden]})
            try:
                job = client.wait(job.id, timeout_s=3600)
            except JobError as err:
                print(f"job did not succeed: {err}", flush=True)
                job = err.job
            print(f"job {job.status} in {time.perf_counter() - started:.0f} s; validation "
                  f"passed: {job.validation_passed}; speed-up {job.speedup}", flush=True)
            peaks = (job.data.get("stage_memory") or {}).get("peak_rss_mb") or {}
            for stage, peak in peaks.items():
                print(f"  {stage:>12}: peak RSS {peak:,.0f} MB = {peak * _MB / weights:.2f}x "
                      "the weights", flush=True)
            if "optimize" in peaks:
                print(f"fusion (stage optimize): {peaks['optimize'] * _MB / weights:.2f}x the "
                      "weights (target < 1.5x)")
    finally:
        stop(service, timeout_s=60)
