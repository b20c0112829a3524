"""Load that must lose nothing: N jobs submitted at once to a running FuseForge, status reads
going on meanwhile; every job must end `succeeded`, claimed once.

Starts `fuseforge run` (API + worker + janitor) in a fresh data folder, on the embedded defaults
or on the PostgreSQL database and Redis broker given, uploads one small CNN, submits `--jobs`
jobs from `--clients` threads at once, and reads job statuses in a loop until all have ended.
Prints the drain time (first submit to last job ended), jobs per minute, the status reads' rate
and latency, and any job lost, failed or claimed more than once (exit code 1 then).

    .venv/bin/python -m bench.load_jobs [--jobs 200]                      # embedded defaults
    .venv/bin/python -m bench.load_jobs --database-url postgresql+psycopg://postgres@127.0.0.1/x \\
        --broker-url redis://127.0.0.1:6379/9                             # PostgreSQL + Redis

The database must exist and be empty (it is migrated); the Redis database is flushed. One
worker takes one job at a time, so the drain time is the per-job cost of the pipeline (the
job's own process included), not the API's.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import redis

from bench.service.stack import free_port, fuseforge_env, start_fuseforge, stop, wait_healthy
from optimizer.testing.models import model_bytes, small_cnn

_JOB = {"input_shapes": {"input": [1, 3, 32, 32]}, "validation": {"samples": 2},
        "benchmark": {"warmup": 1, "iterations": 5, "measure_memory": False}}
_FINAL = ("succeeded", "failed", "cancelled")


class _Reader:
    """Reads job statuses in a loop (a client polling), timing each read."""

    def __init__(self, base_url: str) -> None:
        self._client = httpx.Client(base_url=base_url, timeout=30)
        self.latencies_ms: list[float] = []
        self.errors = 0
        self.statuses: dict[str, str] = {}
        self._stop = threading.Event()

    def run(self, job_ids: list[str]) -> None:
        while not self._stop.is_set():
            for job_id in job_ids:
                if self.statuses.get(job_id) in _FINAL:
                    continue
                started = time.perf_counter()
                try:
                    response = self._client.get(f"/v1/jobs/{job_id}")
                    response.raise_for_status()
                    self.statuses[job_id] = response.json()["status"]
                except httpx.HTTPError:
                    self.errors += 1
                self.latencies_ms.append((time.perf_counter() - started) * 1000)
            if all(self.statuses.get(j) in _FINAL for j in job_ids):
                return

    def stop(self) -> None:
        self._stop.set()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--clients", type=int, default=20, help="threads submitting at once")
    parser.add_argument("--database-url", help="an empty PostgreSQL database (default: SQLite)")
    parser.add_argument("--broker-url", help="a Redis database, flushed (default: SQLite broker)")
    parser.add_argument("--timeout-s", type=float, default=3600)
    args = parser.parse_args(argv)

    folder = Path(tempfile.mkdtemp(prefix="fuseforge-load-"))
    port = free_port()
    base_url = f"http://127.0.0.1:{port}"
    if args.broker_url:
        redis.Redis.from_url(args.broker_url).flushdb()
    env = fuseforge_env(folder / "data", port, FUSEFORGE_DATABASE_URL=args.database_url,
                        FUSEFORGE_BROKER_URL=args.broker_url)
    service = start_fuseforge("run", env, folder / "fuseforge-run.log")
    try:
        wait_healthy(f"{base_url}/healthz", service)
        model = httpx.post(f"{base_url}/v1/models", files={"file": (
            "cnn.onnx", model_bytes(small_cnn(seed=7)))}, timeout=60).json()["id"]

        def submit(_: int) -> str:
            response = httpx.post(f"{base_url}/v1/jobs", json={"model_id": model, **_JOB},
                                  timeout=120)
            response.raise_for_status()
            return str(response.json()["id"])

        started = time.monotonic()
        with ThreadPoolExecutor(max_workers=args.clients) as pool:
            job_ids = list(pool.map(submit, range(args.jobs)))
        submitted_s = time.monotonic() - started
        reader = _Reader(base_url)
        thread = threading.Thread(target=reader.run, args=(job_ids,), daemon=True)
        thread.start()
        thread.join(timeout=args.timeout_s)
        reader.stop()
        drain_s = time.monotonic() - started
        return _report(base_url, job_ids, reader, submitted_s, drain_s, args)
    finally:
        stop(service)
        print(f"logs and data: {folder}")


def _report(base_url: str, job_ids: list[str], reader: _Reader, submitted_s: float,
            drain_s: float, args: argparse.Namespace) -> int:
    client = httpx.Client(base_url=base_url, timeout=30)
    jobs = [client.get(f"/v1/jobs/{job_id}").json() for job_id in job_ids]
    claims = [sum(e["message"].startswith("claimed by worker") for e in job["events"])
              for job in jobs]
    by_status: dict[str, int] = {}
    for job in jobs:
        by_status[job["status"]] = by_status.get(job["status"], 0) + 1
    latencies = sorted(reader.latencies_ms)
    setup = "PostgreSQL + Redis" if args.database_url else "embedded (SQLite + SQLite broker)"
    print(f"{args.jobs} jobs on {setup}, submitted by {args.clients} clients in "
          f"{submitted_s:.1f} s")
    print(f"drain time: {drain_s:.1f} s ({args.jobs / drain_s * 60:.1f} jobs/min)")
    print(f"statuses: {by_status}; claimed more than once: {sum(c > 1 for c in claims)}")
    if latencies:
        print(f"status reads during the drain: {len(latencies)} ({len(latencies) / drain_s:.1f}/s),"
              f" p50 {statistics.median(latencies):.1f} ms, "
              f"p99 {latencies[int(0.99 * (len(latencies) - 1))]:.1f} ms, errors {reader.errors}")
    lost = by_status.get("succeeded", 0) != args.jobs or any(c != 1 for c in claims)
    return 1 if lost or reader.errors else 0


if __name__ == "__main__":
    sys.exit(main())
