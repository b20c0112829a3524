"""From a job's submission to its claim by an idle worker: how long a job waits in the broker.

Starts `fuseforge run` on a fresh data folder (embedded defaults, or the PostgreSQL database and
Redis broker given), uploads a small model, then submits `--jobs` jobs one after another, each
a second after the one before has ended (so the worker is idle), and prints the median and 90th
percentile of `started_at - created_at`: both stamped by the database (the insert, the claim).

    .venv/bin/python -m bench.service.submit_latency [--jobs 20]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

import httpx

from bench.service.stack import free_port, fuseforge_env, start_fuseforge, stop, wait_healthy
from optimizer.testing.models import model_bytes, small_cnn

_JOB = {"input_shapes": {"input": [1, 3, 32, 32]}, "validation": {"samples": 1},
        "benchmark": {"warmup": 0, "iterations": 1, "measure_memory": False}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=20)
    parser.add_argument("--database-url")
    parser.add_argument("--broker-url")
    args = parser.parse_args(argv)
    folder = Path(tempfile.mkdtemp(prefix="fuseforge-submit-"))
    port = free_port()
    env = fuseforge_env(folder / "data", port, FUSEFORGE_HTTP__READ_CACHE_S="0",
                        FUSEFORGE_DATABASE_URL=args.database_url,
                        FUSEFORGE_BROKER_URL=args.broker_url)
    service = start_fuseforge("run", env, folder / "run.log")
    base_url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(f"{base_url}/healthz", service)
        model = httpx.post(f"{base_url}/v1/models", files={"file": (
            "cnn.onnx", model_bytes(small_cnn(seed=3)))}, timeout=60).json()["id"]
        waits = []
        for _ in range(args.jobs + 1):  # the first warms the worker up and is not counted
            time.sleep(1.0)  # the worker finishes with the last job (its process exits)
            job_id = httpx.post(f"{base_url}/v1/jobs", json={"model_id": model, **_JOB},
                                timeout=60).json()["id"]
            job = _ended(base_url, job_id)
            waits.append((_stamp(job["started_at"]) - _stamp(job["created_at"])).total_seconds())
        waits = waits[1:]
        setup = "PostgreSQL + Redis" if args.database_url else "embedded (SQLite broker)"
        print(f"{setup}: submit → claimed by an idle worker over {len(waits)} jobs: "
              f"p50 {statistics.median(waits) * 1000:.0f} ms, "
              f"p90 {sorted(waits)[int(0.9 * (len(waits) - 1))] * 1000:.0f} ms")
    finally:
        stop(service)
    return 0


def _stamp(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def _ended(base_url: str, job_id: str) -> dict:  # type: ignore[type-arg]
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        job = httpx.get(f"{base_url}/v1/jobs/{job_id}", timeout=30).json()
        if job["status"] in ("succeeded", "failed", "cancelled"):
            return job  # type: ignore[no-any-return]
        time.sleep(0.1)
    raise SystemExit(f"job {job_id} did not end")


if __name__ == "__main__":
    sys.exit(main())
